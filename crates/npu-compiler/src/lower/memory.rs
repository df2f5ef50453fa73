//! Liveness-based placement of intermediate buffers in one arena.
//!
//! Invariant: two buffers whose live ranges (first write .. last read, inclusive, in step
//! indices) overlap never share bytes. Buffers are placed largest first at the lowest
//! aligned offset that fits between already placed, overlapping buffers.

/// Alignment of every buffer in the arena, in bytes.
pub const ALIGN: u64 = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    pub bytes: u64,
    pub first: usize,
    pub last: usize,
}

/// Returns (offset per buffer, arena size).
pub fn plan(bufs: &[Interval]) -> (Vec<u64>, u64) {
    let mut order: Vec<usize> = (0..bufs.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(bufs[i].bytes), bufs[i].first));
    let mut offsets = vec![0u64; bufs.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut total = 0;
    for i in order {
        let b = &bufs[i];
        let size = b.bytes.div_ceil(ALIGN) * ALIGN;
        let mut taken: Vec<(u64, u64)> = placed
            .iter()
            .filter(|&&j| bufs[j].first <= b.last && b.first <= bufs[j].last)
            .map(|&j| {
                (
                    offsets[j],
                    offsets[j] + bufs[j].bytes.div_ceil(ALIGN) * ALIGN,
                )
            })
            .collect();
        taken.sort_unstable();
        let mut at = 0;
        for (s, e) in taken {
            if at + size <= s {
                break;
            }
            at = at.max(e);
        }
        offsets[i] = at;
        total = total.max(at + size);
        placed.push(i);
    }
    (offsets, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disjoint_lifetimes_share_and_overlapping_do_not() {
        let bufs = vec![
            Interval {
                bytes: 100,
                first: 0,
                last: 1,
            },
            Interval {
                bytes: 100,
                first: 1,
                last: 2,
            },
            Interval {
                bytes: 100,
                first: 2,
                last: 3,
            },
        ];
        let (off, total) = plan(&bufs);
        assert_ne!(off[0], off[1]);
        assert_ne!(off[1], off[2]);
        assert_eq!(off[0], off[2]);
        assert_eq!(total, 256);
    }

    #[test]
    fn random_plans_never_overlap_live_buffers() {
        let mut seed = 12345u64;
        let mut rnd = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        let bufs: Vec<Interval> = (0..200)
            .map(|_| {
                let first = rnd(100) as usize;
                Interval {
                    bytes: 1 + rnd(5000),
                    first,
                    last: first + rnd(20) as usize,
                }
            })
            .collect();
        let (off, total) = plan(&bufs);
        for i in 0..bufs.len() {
            assert!(off[i] + bufs[i].bytes <= total);
            for j in 0..i {
                let live = bufs[i].first <= bufs[j].last && bufs[j].first <= bufs[i].last;
                let mem = off[i] < off[j] + bufs[j].bytes && off[j] < off[i] + bufs[i].bytes;
                assert!(!(live && mem), "buffers {i} and {j} overlap");
            }
        }
    }
}
