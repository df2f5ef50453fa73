//! Resampling: `upsample_*` (nearest, nearest-exact, N-d linear, bicubic; both
//! align_corners; recorded scale factors decide source coordinates, as in ATen's
//! UpSample.h), `grid_sampler_2d` (bilinear/nearest, zeros/border/reflection) and
//! pixel_shuffle/pixel_unshuffle. Interpolation is separable: per spatial dim and output
//! index a list of (source index, weight) taps.

use super::data::{f64s, from_f64, take, R};
use super::Args;
use npu_ir::{GridPadding, Interp};
use npu_runtime::tensor::HostTensor;

type Taps = Vec<Vec<(usize, f64)>>;

/// `area_pixel_compute_scale`.
fn pixel_scale(i: usize, o: usize, align_corners: bool, scale: Option<f64>) -> f64 {
    if align_corners {
        if o > 1 {
            (i as f64 - 1.0) / (o as f64 - 1.0)
        } else {
            0.0
        }
    } else {
        match scale {
            Some(s) if s > 0.0 => 1.0 / s,
            _ => i as f64 / o as f64,
        }
    }
}

/// `area_pixel_compute_source_index`.
fn source_index(scale: f64, dst: usize, align_corners: bool, cubic: bool) -> f64 {
    if align_corners {
        scale * dst as f64
    } else {
        let s = scale * (dst as f64 + 0.5) - 0.5;
        if !cubic && s < 0.0 {
            0.0
        } else {
            s
        }
    }
}

fn cubic_weights(t: f64) -> [f64; 4] {
    const A: f64 = -0.75;
    let c1 = |x: f64| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    let c2 = |x: f64| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
    [c2(t + 1.0), c1(t), c1(1.0 - t), c2(2.0 - t)]
}

fn taps(
    interp: Interp,
    i: usize,
    o: usize,
    align_corners: bool,
    scale: Option<f64>,
) -> Vec<(usize, f64)> {
    match interp {
        Interp::Nearest | Interp::NearestExact => {
            // nearest ignores align_corners; ATen computes the scale in f32
            let s = match scale {
                Some(s) if s > 0.0 => (1.0 / s) as f32,
                _ => i as f32 / o as f32,
            };
            let off = if interp == Interp::NearestExact {
                0.5
            } else {
                0.0
            };
            (0..o)
                .map(|d| {
                    let src = ((d as f32 + off) * s).floor() as usize;
                    (src.min(i - 1), 1.0)
                })
                .collect()
        }
        Interp::Linear => {
            let sc = pixel_scale(i, o, align_corners, scale);
            (0..o)
                .flat_map(|d| {
                    let src = source_index(sc, d, align_corners, false);
                    let i0 = (src.floor() as usize).min(i - 1);
                    let i1 = if i0 < i - 1 { i0 + 1 } else { i0 };
                    let l1 = src - i0 as f64;
                    [(i0, 1.0 - l1), (i1, l1)]
                })
                .collect()
        }
        Interp::Cubic => {
            let sc = pixel_scale(i, o, align_corners, scale);
            (0..o)
                .flat_map(|d| {
                    let src = source_index(sc, d, align_corners, true);
                    let f = src.floor();
                    let w = cubic_weights(src - f);
                    (0..4).map(move |k| {
                        let at = (f as i64 - 1 + k as i64).clamp(0, i as i64 - 1) as usize;
                        (at, w[k])
                    })
                })
                .collect()
        }
    }
}

/// Taps per output index: nearest has one, linear two, cubic four.
fn per_output(interp: Interp) -> usize {
    match interp {
        Interp::Nearest | Interp::NearestExact => 1,
        Interp::Linear => 2,
        Interp::Cubic => 4,
    }
}

pub fn upsample(
    a: &Args,
    interp: Interp,
    align_corners: bool,
    scales: &[Option<f64>],
) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    let n = scales.len();
    let xs = x.shape();
    if xs.len() != n + 2 || out.shape.len() != n + 2 || out.shape[..2] != xs[..2] {
        return Err(format!(
            "{n}-D upsampling of {xs:?} into {:?} (needs [N, C, {n} spatial dims])",
            out.shape
        ));
    }
    if xs[2..].contains(&0) {
        return Err("upsampling an empty input".into());
    }
    let (ins, outs) = (&xs[2..], &out.shape[2..]);
    let k = per_output(interp);
    let all: Vec<Taps> = (0..n)
        .map(|d| {
            taps(interp, ins[d], outs[d], align_corners, scales[d])
                .chunks(k)
                .map(<[(usize, f64)]>::to_vec)
                .collect()
        })
        .collect();
    let planes = xs[0] * xs[1];
    let v = f64s(x);
    let plane_len: usize = ins.iter().product();
    let n_out: usize = outs.iter().product();
    let mut strides = vec![1usize; n];
    for d in (0..n.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * ins[d + 1];
    }
    let mut res = Vec::with_capacity(planes * n_out);
    for p in 0..planes {
        let plane = &v[p * plane_len..(p + 1) * plane_len];
        for o in 0..n_out {
            let mut rem = o;
            let mut idx = vec![0; n];
            for d in (0..n).rev() {
                idx[d] = rem % outs[d];
                rem /= outs[d];
            }
            let mut acc = vec![(0usize, 1.0f64)];
            for d in 0..n {
                let (sd, t) = (strides[d], &all[d][idx[d]]);
                acc = acc
                    .iter()
                    .flat_map(|&(base, w)| t.iter().map(move |&(q, wq)| (base + q * sd, w * wq)))
                    .collect();
            }
            res.push(acc.iter().map(|&(q, w)| plane[q] * w).sum());
        }
    }
    Ok(from_f64(out, &res))
}

/// `reflect_coordinates` of ATen's GridSampler.h.
fn reflect(x: f64, twice_low: i64, twice_high: i64) -> f64 {
    if twice_low == twice_high {
        return 0.0;
    }
    let min = twice_low as f64 / 2.0;
    let span = (twice_high - twice_low) as f64 / 2.0;
    let x = (x - min).abs();
    let extra = x % span;
    let flips = (x / span).floor() as i64;
    if flips % 2 == 0 {
        extra + min
    } else {
        span - extra + min
    }
}

fn grid_source(coord: f64, size: usize, padding: GridPadding, align_corners: bool) -> f64 {
    let s = size as f64;
    let c = if align_corners {
        (coord + 1.0) / 2.0 * (s - 1.0)
    } else {
        ((coord + 1.0) * s - 1.0) / 2.0
    };
    let clip = |c: f64| c.max(0.0).min(s - 1.0);
    match padding {
        GridPadding::Zeros => c,
        GridPadding::Border => clip(c),
        GridPadding::Reflection => {
            let r = if align_corners {
                reflect(c, 0, 2 * (size as i64 - 1))
            } else {
                reflect(c, -1, 2 * size as i64 - 1)
            };
            clip(r)
        }
    }
}

pub fn grid_sample(
    a: &Args,
    interp: Interp,
    padding: GridPadding,
    align_corners: bool,
) -> R<HostTensor> {
    a.count(2, 2)?;
    let (x, grid, out) = (a.input(0)?, a.input(1)?, a.out(0)?);
    let (xs, gs) = (x.shape(), grid.shape());
    if xs.len() != 4
        || gs.len() != 4
        || gs[3] != 2
        || gs[0] != xs[0]
        || out.shape != [xs[0], xs[1], gs[1], gs[2]]
    {
        return Err(format!(
            "grid_sampler_2d of {xs:?} with grid {gs:?} into {:?}",
            out.shape
        ));
    }
    let (n, c, h, w, ho, wo) = (xs[0], xs[1], xs[2], xs[3], gs[1], gs[2]);
    let (v, g) = (f64s(x), f64s(grid));
    let at = |b: usize, ch: usize, yy: i64, xx: i64| -> f64 {
        if yy < 0 || xx < 0 || yy >= h as i64 || xx >= w as i64 {
            0.0
        } else {
            v[((b * c + ch) * h + yy as usize) * w + xx as usize]
        }
    };
    let mut res = vec![0.0; n * c * ho * wo];
    for b in 0..n {
        for oy in 0..ho {
            for ox in 0..wo {
                let gi = ((b * ho + oy) * wo + ox) * 2;
                let ix = grid_source(g[gi], w, padding, align_corners);
                let iy = grid_source(g[gi + 1], h, padding, align_corners);
                for ch in 0..c {
                    let val = match interp {
                        Interp::Linear => {
                            let (x0, y0) = (ix.floor(), iy.floor());
                            let (dx, dy) = (ix - x0, iy - y0);
                            let (x0, y0) = (x0 as i64, y0 as i64);
                            at(b, ch, y0, x0) * (1.0 - dx) * (1.0 - dy)
                                + at(b, ch, y0, x0 + 1) * dx * (1.0 - dy)
                                + at(b, ch, y0 + 1, x0) * (1.0 - dx) * dy
                                + at(b, ch, y0 + 1, x0 + 1) * dx * dy
                        }
                        Interp::Nearest | Interp::NearestExact => at(
                            b,
                            ch,
                            iy.round_ties_even() as i64,
                            ix.round_ties_even() as i64,
                        ),
                        Interp::Cubic => {
                            return Err("bicubic grid_sampler_2d is not supported".into())
                        }
                    };
                    res[((b * c + ch) * ho + oy) * wo + ox] = val;
                }
            }
        }
    }
    Ok(from_f64(out, &res))
}

/// `pixel_shuffle` ([*, C r², H, W] -> [*, C, H r, W r]) or its inverse.
pub fn pixel_shuffle(a: &Args, r: usize, inverse: bool) -> R<HostTensor> {
    a.count(1, 1)?;
    let (x, out) = (a.input(0)?, a.out(0)?);
    // the shuffled (large) side: [*, C, H r, W r]; the packed side: [*, C r², H, W]
    let (packed, big) = if inverse {
        (&out.shape[..], x.shape())
    } else {
        (x.shape(), &out.shape[..])
    };
    let k = packed.len();
    if k < 3 || big.len() != k || packed[..k - 3] != big[..k - 3] {
        return Err(format!(
            "pixel shuffle of {:?} into {:?}",
            x.shape(),
            out.shape
        ));
    }
    let (c, h, w) = (big[k - 3], packed[k - 2], packed[k - 1]);
    if packed[k - 3] != c * r * r || big[k - 2] != h * r || big[k - 1] != w * r {
        return Err(format!(
            "pixel shuffle by {r} of {:?} into {:?}",
            x.shape(),
            out.shape
        ));
    }
    let batch: usize = packed[..k - 3].iter().product();
    // flat position in the packed layout of each element of the big layout, in order
    let mut map = Vec::with_capacity(batch * c * h * r * w * r);
    for b in 0..batch {
        for ch in 0..c {
            for y in 0..h * r {
                for xx in 0..w * r {
                    let pc = ch * r * r + (y % r) * r + xx % r;
                    map.push(((b * c * r * r + pc) * h + y / r) * w + xx / r);
                }
            }
        }
    }
    if !inverse {
        return Ok(take(x, &map, out.shape.clone()));
    }
    let mut inv = vec![0; map.len()];
    for (i, &m) in map.iter().enumerate() {
        inv[m] = i;
    }
    Ok(take(x, &inv, out.shape.clone()))
}
