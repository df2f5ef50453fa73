//! Agreement metrics for checking outputs against a reference (PyTorch's, another
//! backend's): the end-to-end tests of every crate and the check tools share them.

/// Pearson correlation, in f64.
pub fn pearson(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len() as f64;
    let ma = a.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let mb = b.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let (dx, dy) = (f64::from(x) - ma, f64::from(y) - mb);
        sab += dx * dy;
        saa += dx * dx;
        sbb += dy * dy;
    }
    sab / (saa * sbb).sqrt()
}

/// Index of the largest value (the first one on ties).
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// The indices of the 5 largest values, as a sorted set.
pub fn top5(v: &[f32]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]));
    let mut t = idx[..5.min(v.len())].to_vec();
    t.sort();
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics() {
        assert!((pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.5]) - 0.9986).abs() < 1e-3);
        assert_eq!(argmax(&[0.5, 3.0, 3.0, -1.0]), 1);
        assert_eq!(
            top5(&[0.0, 9.0, 1.0, 8.0, 2.0, 7.0, 3.0]),
            vec![1, 3, 4, 5, 6]
        );
    }
}
