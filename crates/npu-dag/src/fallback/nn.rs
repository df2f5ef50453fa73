//! NCHW conv2d (im2col + GEMM) and scaled dot-product attention. Pooling is in `pool.rs`,
//! resampling in `resample.rs`.

use super::data::{broadcast_map, f32s, f64s, from_f32, from_f64, want_rank, R};
use super::linalg::gemm;
use super::Args;
use npu_ir::DType;
use npu_runtime::tensor::HostTensor;

fn out_hw(a: &Args, n: usize, c: usize) -> R<(usize, usize)> {
    let out = a.out(0)?;
    match out.shape.as_slice() {
        [on, oc, oh, ow] if *on == n && *oc == c => Ok((*oh, *ow)),
        s => Err(format!("output {s:?} is not [{n}, {c}, H, W]")),
    }
}

/// [N, C, H, W] of a 4-D input.
fn nchw(x: &HostTensor) -> R<[usize; 4]> {
    want_rank("input", x, 4)?;
    let s = x.shape();
    Ok([s[0], s[1], s[2], s[3]])
}

fn conv_len(i: usize, k: usize, s: usize, p: usize, d: usize) -> usize {
    let span = d * (k - 1) + 1;
    if i + 2 * p < span {
        0
    } else {
        (i + 2 * p - span) / s + 1
    }
}

pub fn conv2d(
    a: &Args,
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
) -> R<HostTensor> {
    a.count(2, 3)?;
    let (x, w) = (a.input(0)?, a.input(1)?);
    let [n, c, h, wd] = nchw(x)?;
    want_rank("weight", w, 4)?;
    let ws = w.shape();
    let (o, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    if groups == 0 || c != cg * groups || o % groups != 0 || kh == 0 || kw == 0 {
        return Err(format!(
            "conv2d input {:?}, weight {ws:?}, groups {groups} do not fit",
            x.shape()
        ));
    }
    if stride.contains(&0) || dilation.contains(&0) {
        return Err("conv2d stride and dilation must be positive".into());
    }
    let (oh, ow) = out_hw(a, n, o)?;
    let want = (
        conv_len(h, kh, stride[0], padding[0], dilation[0]),
        conv_len(wd, kw, stride[1], padding[1], dilation[1]),
    );
    if (oh, ow) != want {
        return Err(format!(
            "conv2d output is {oh}x{ow}, expected {}x{}",
            want.0, want.1
        ));
    }
    let xv = f32s(x);
    let wv = f32s(w);
    let bias = match a.ins.get(2) {
        Some(b) if b.numel() != o => {
            return Err(format!("conv2d bias {:?} for {o} channels", b.shape()))
        }
        Some(b) => Some(f32s(b)),
        None => None,
    };
    let og = o / groups;
    let kk = cg * kh * kw;
    let ohw = oh * ow;
    let mut out = vec![0f32; n * o * ohw];
    let mut col = vec![0f32; kk * ohw];
    for b in 0..n {
        for g in 0..groups {
            // im2col: rows (ci, ky, kx), columns (oy, ox)
            for ci in 0..cg {
                let plane = &xv[((b * c) + g * cg + ci) * h * wd..][..h * wd];
                for ky in 0..kh {
                    for kx in 0..kw {
                        let r = (ci * kh + ky) * kw + kx;
                        let dst = &mut col[r * ohw..(r + 1) * ohw];
                        for oy in 0..oh {
                            let iy =
                                (oy * stride[0] + ky * dilation[0]) as isize - padding[0] as isize;
                            for ox in 0..ow {
                                let ix = (ox * stride[1] + kx * dilation[1]) as isize
                                    - padding[1] as isize;
                                dst[oy * ow + ox] = if iy >= 0
                                    && (iy as usize) < h
                                    && ix >= 0
                                    && (ix as usize) < wd
                                {
                                    plane[iy as usize * wd + ix as usize]
                                } else {
                                    0.0
                                };
                            }
                        }
                    }
                }
            }
            let wg = &wv[g * og * kk..(g + 1) * og * kk];
            let dst = &mut out[(b * o + g * og) * ohw..(b * o + (g + 1) * og) * ohw];
            gemm(wg, &col, dst, og, kk, ohw);
        }
    }
    if let Some(bias) = bias {
        for (i, plane) in out.chunks_mut(ohw.max(1)).enumerate() {
            let bv = bias[i % o];
            plane.iter_mut().for_each(|v| *v += bv);
        }
    }
    Ok(from_f32(a.out(0)?, &out))
}

/// For each q batch index (leading dims of q), the batch index of k/v: broadcast dims read 0,
/// and with GQA the head dim (the last leading dim) maps h -> h / (Hq / Hkv).
fn kv_batch_map(q_lead: &[usize], k_lead: &[usize], gqa: bool) -> R<Vec<usize>> {
    if !gqa {
        return broadcast_map(k_lead, q_lead);
    }
    if q_lead.len() != k_lead.len() || q_lead.is_empty() {
        return Err(format!(
            "enable_gqa with batch dims {q_lead:?} and {k_lead:?}"
        ));
    }
    let r = q_lead.len();
    let (hq, hk) = (q_lead[r - 1], k_lead[r - 1]);
    if hk == 0 || hq % hk != 0 {
        return Err(format!(
            "enable_gqa with {hq} query heads and {hk} key heads"
        ));
    }
    let mut eff = q_lead.to_vec();
    eff[r - 1] = hk;
    let base = broadcast_map(k_lead, &eff)?;
    let nq: usize = q_lead.iter().product();
    let outer = nq / hq.max(1);
    let mut out = Vec::with_capacity(nq);
    for o in 0..outer {
        for h in 0..hq {
            out.push(base[o * hk + h / (hq / hk)]);
        }
    }
    Ok(out)
}

pub fn sdpa(a: &Args, causal: bool, scale: Option<f64>, gqa: bool) -> R<HostTensor> {
    a.count(3, 4)?;
    let (q, k, v, out) = (a.input(0)?, a.input(1)?, a.input(2)?, a.out(0)?);
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    if qs.len() < 2 || ks.len() < 2 || vs.len() != ks.len() {
        return Err(format!("sdpa q {qs:?}, k {ks:?}, v {vs:?}"));
    }
    let (l, e) = (qs[qs.len() - 2], qs[qs.len() - 1]);
    let (s, ek) = (ks[ks.len() - 2], ks[ks.len() - 1]);
    let (sv, ev) = (vs[vs.len() - 2], vs[vs.len() - 1]);
    if ek != e || sv != s || ks[..ks.len() - 2] != vs[..vs.len() - 2] {
        return Err(format!("sdpa q {qs:?}, k {ks:?}, v {vs:?} do not fit"));
    }
    let q_lead = &qs[..qs.len() - 2];
    let kmap = kv_batch_map(q_lead, &ks[..ks.len() - 2], gqa)?;
    let nb = kmap.len();
    let mut want = q_lead.to_vec();
    want.extend([l, ev]);
    if out.shape != want {
        return Err(format!("sdpa output {:?}, expected {want:?}", out.shape));
    }
    let scale = scale.unwrap_or(1.0 / (e as f64).sqrt());
    let (qv, kv, vv) = (f64s(q), f64s(k), f64s(v));
    let mut scores_shape = q_lead.to_vec();
    scores_shape.extend([l, s]);
    // mask: None, additive floats, or bool (true = attend)
    let mask: Option<(Vec<f64>, Vec<usize>, bool)> = match a.ins.get(3) {
        None => None,
        Some(m) => Some((
            f64s(m),
            broadcast_map(m.shape(), &scores_shape)?,
            m.dtype() == DType::Bool,
        )),
    };
    let mut res = vec![0f64; nb * l * ev];
    let mut row = vec![0f64; s];
    for b in 0..nb {
        let kb = kmap[b];
        for i in 0..l {
            let qi = &qv[(b * l + i) * e..][..e];
            for (j, r) in row.iter_mut().enumerate() {
                let kj = &kv[(kb * s + j) * e..][..e];
                let mut d = qi.iter().zip(kj).map(|(x, y)| x * y).sum::<f64>() * scale;
                if causal && j > i {
                    d = f64::NEG_INFINITY;
                }
                if let Some((mv, map, is_bool)) = &mask {
                    let m = mv[map[(b * l + i) * s + j]];
                    if *is_bool {
                        if m == 0.0 {
                            d = f64::NEG_INFINITY;
                        }
                    } else {
                        d += m;
                    }
                }
                *r = d;
            }
            let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let dst = &mut res[(b * l + i) * ev..][..ev];
            if mx == f64::NEG_INFINITY {
                continue; // a fully masked row attends to nothing: zeros (safe softmax)
            }
            let mut sum = 0.0;
            for r in row.iter_mut() {
                *r = (*r - mx).exp();
                sum += *r;
            }
            for (j, &p) in row.iter().enumerate() {
                let w = p / sum;
                let vj = &vv[(kb * s + j) * ev..][..ev];
                for (d, &x) in dst.iter_mut().zip(vj) {
                    *d += w * x;
                }
            }
        }
    }
    Ok(from_f64(out, &res))
}
