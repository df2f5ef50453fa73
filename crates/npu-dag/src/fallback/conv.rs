//! N-d convolution (1 to 3 spatial dims), plain or transposed, grouped, batched or not
//! (`aten.convolution`, `conv_transpose{1,2,3}d`, `conv3d`). A 2-D plain convolution runs
//! the im2col path of `nn::conv2d`; the rest are direct loops over a 3-D view (missing
//! leading spatial dims are 1), accumulating in f64.

use super::data::{f64s, from_f64, reshaped, R};
use super::Args;
use npu_runtime::tensor::HostTensor;

/// Geometry padded to three spatial dims.
struct Geo {
    stride: [usize; 3],
    padding: [usize; 3],
    dilation: [usize; 3],
}

fn pad3(v: &[usize], fill: usize) -> [usize; 3] {
    let mut r = [fill; 3];
    r[3 - v.len()..].copy_from_slice(v);
    r
}

fn flat3(s: &[usize]) -> [usize; 3] {
    pad3(s, 1)
}

#[allow(clippy::too_many_arguments)]
pub fn convolution(
    a: &Args,
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    transposed: bool,
    output_padding: &[usize],
    groups: usize,
) -> R<HostTensor> {
    a.count(2, 3)?;
    let (x, w, out) = (a.input(0)?, a.input(1)?, a.out(0)?);
    let n = stride.len();
    if !(1..=3).contains(&n) || w.shape().len() != n + 2 {
        return Err(format!(
            "convolution with {n} spatial dims and weight {:?}",
            w.shape()
        ));
    }
    // unbatched input: add the batch dim and drop it from the result
    let unbatched = x.shape().len() == n + 1;
    if !unbatched && x.shape().len() != n + 2 {
        return Err(format!(
            "convolution with {n} spatial dims of an input {:?}",
            x.shape()
        ));
    }
    let xb;
    let x = if unbatched {
        let mut s = x.shape().to_vec();
        s.insert(0, 1);
        xb = reshaped(x, &s)?;
        &xb
    } else {
        x
    };
    let mut out_shape = out.shape.clone();
    if unbatched {
        out_shape.insert(0, 1);
    }
    let out_b = npu_ir::TensorType {
        shape: out_shape.clone(),
        dtype: out.dtype,
    };
    if !transposed && n == 2 {
        let pair = |v: &[usize]| [v[0], v[1]];
        let ins = [x, a.input(1)?];
        let ins_b: Vec<&HostTensor> = ins.into_iter().chain(a.ins.get(2).copied()).collect();
        let outs = [&out_b];
        let inner = Args {
            ins: &ins_b,
            outs: &outs,
        };
        let r = super::nn::conv2d(&inner, pair(stride), pair(padding), pair(dilation), groups)?;
        return reshaped(&r, &out.shape);
    }
    let xs = x.shape();
    let ws = w.shape();
    let (nb, cin, cout) = (
        xs[0],
        xs[1],
        if transposed { ws[1] * groups } else { ws[0] },
    );
    let (cin_g, cout_g) = (cin / groups.max(1), cout / groups.max(1));
    let w_in = if transposed { ws[0] } else { ws[1] * groups };
    if groups == 0 || cin % groups != 0 || cout % groups != 0 || w_in != cin {
        return Err(format!(
            "convolution input {xs:?}, weight {ws:?}, groups {groups}, transposed {transposed} do not fit"
        ));
    }
    let (ins, ks, outs) = (flat3(&xs[2..]), flat3(&ws[2..]), flat3(&out_shape[2..]));
    let g = Geo {
        stride: pad3(stride, 1),
        padding: pad3(padding, 0),
        dilation: pad3(dilation, 1),
    };
    let opad = pad3(output_padding, 0);
    if ins.contains(&0) || ks.contains(&0) {
        return Err(format!(
            "convolution of an empty input {xs:?} or kernel {ws:?}"
        ));
    }
    for d in 0..3 {
        let span = g.dilation[d] * (ks[d] - 1) + 1;
        let want = if transposed {
            ((ins[d] - 1) * g.stride[d] + span + opad[d]).checked_sub(2 * g.padding[d])
        } else {
            (ins[d] + 2 * g.padding[d])
                .checked_sub(span)
                .map(|e| e / g.stride[d] + 1)
        };
        if out_shape[0] != nb || out_shape[1] != cout || want != Some(outs[d]) {
            return Err(format!(
                "convolution output {:?}, expected {cout} channels and spatial {want:?} at dim {d}",
                out.shape
            ));
        }
    }
    let (xv, wv) = (f64s(x), f64s(w));
    let bias = match a.ins.get(2) {
        Some(b) if b.numel() != cout => {
            return Err(format!(
                "convolution bias {:?} for {cout} channels",
                b.shape()
            ))
        }
        Some(b) => f64s(b),
        None => vec![0.0; cout],
    };
    let in_len: usize = ins.iter().product();
    let out_len: usize = outs.iter().product();
    let k_len: usize = ks.iter().product();
    let mut res = vec![0.0; nb * cout * out_len];
    // (input position, output position) pairs per kernel tap: o = i * s - p + k * d
    let mut pairs: Vec<Vec<(usize, usize)>> = vec![Vec::new(); k_len];
    for (kk, list) in pairs.iter_mut().enumerate() {
        let k = [kk / (ks[1] * ks[2]), (kk / ks[2]) % ks[1], kk % ks[2]];
        let (outer, other) = if transposed { (ins, outs) } else { (outs, ins) };
        for p in 0..outer.iter().product::<usize>() {
            let q = [
                p / (outer[1] * outer[2]),
                (p / outer[2]) % outer[1],
                p % outer[2],
            ];
            let mut flat = 0usize;
            let mut ok = true;
            for d in 0..3 {
                // transposed: q is the input position; plain: the output position
                let v = (q[d] * g.stride[d] + k[d] * g.dilation[d]) as i64 - g.padding[d] as i64;
                if v < 0 || v >= other[d] as i64 {
                    ok = false;
                    break;
                }
                flat = flat * other[d] + v as usize;
            }
            if ok {
                // always (input flat, output flat)
                list.push(if transposed { (p, flat) } else { (flat, p) });
            }
        }
    }
    for b in 0..nb {
        for gi in 0..groups {
            for ci in 0..cin_g {
                let c_in = gi * cin_g + ci;
                let xp = &xv[(b * cin + c_in) * in_len..][..in_len];
                for co in 0..cout_g {
                    let c_out = gi * cout_g + co;
                    let wbase = if transposed {
                        (c_in * cout_g + co) * k_len
                    } else {
                        (c_out * cin_g + ci) * k_len
                    };
                    let op = &mut res[(b * cout + c_out) * out_len..][..out_len];
                    for (kk, list) in pairs.iter().enumerate() {
                        let wk = wv[wbase + kk];
                        for &(i, o) in list {
                            op[o] += xp[i] * wk;
                        }
                    }
                }
            }
        }
        for c in 0..cout {
            for v in &mut res[(b * cout + c) * out_len..][..out_len] {
                *v += bias[c];
            }
        }
    }
    Ok(from_f64(out, &res))
}
