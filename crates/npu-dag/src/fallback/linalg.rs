//! Matrix products in f32: matmul (torch.matmul semantics), linear, addmm, baddbmm.

use super::data::{broadcast_map, f32s, from_f32, R};
use super::Args;
use npu_ir::TensorType;
use npu_runtime::tensor::HostTensor;
use rayon::prelude::*;

/// `c[m, n] = sum_k a[m, k] * b[k, n]`, all row-major; rows in parallel when large.
pub fn gemm(a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
    let row = |(i, ci): (usize, &mut [f32])| {
        ci.fill(0.0);
        let ai = &a[i * k..(i + 1) * k];
        for (p, &av) in ai.iter().enumerate() {
            let bp = &b[p * n..(p + 1) * n];
            for (c, &bv) in ci.iter_mut().zip(bp) {
                *c += av * bv;
            }
        }
    };
    if n == 0 {
        return;
    }
    if m * n * k >= 1 << 18 {
        c[..m * n].par_chunks_mut(n).enumerate().for_each(row);
    } else {
        c[..m * n].chunks_mut(n).enumerate().for_each(row);
    }
}

/// Batched `a @ b` with broadcast batch dims; 1-D operands are promoted and the promoted
/// dim dropped, as torch.matmul does. Returns f32 values in the output's element order.
fn matmul_f32(a: &HostTensor, b: &HostTensor, out: &TensorType) -> R<Vec<f32>> {
    let (mut sa, mut sb) = (a.shape().to_vec(), b.shape().to_vec());
    if sa.is_empty() || sb.is_empty() {
        return Err("matmul of a 0-d tensor".into());
    }
    if sa.len() == 1 {
        sa.insert(0, 1);
    }
    if sb.len() == 1 {
        sb.push(1);
    }
    let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let (kb, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
    if k != kb {
        return Err(format!(
            "matmul inner dims differ: {:?} @ {:?}",
            a.shape(),
            b.shape()
        ));
    }
    let (ba, bb) = (&sa[..sa.len() - 2], &sb[..sb.len() - 2]);
    let batch = super::data::broadcast_shapes(ba, bb)?;
    let nb: usize = batch.iter().product();
    if nb * m * n != out.numel() {
        return Err(format!(
            "matmul {:?} @ {:?} gives {} elements, the output is {out}",
            a.shape(),
            b.shape(),
            nb * m * n
        ));
    }
    let (av, bv) = (f32s(a), f32s(b));
    let ia = broadcast_map(ba, &batch)?;
    let ib = broadcast_map(bb, &batch)?;
    let mut c = vec![0f32; nb * m * n];
    for (bi, cb) in c.chunks_mut((m * n).max(1)).enumerate().take(nb) {
        let pa = &av[ia[bi] * m * k..(ia[bi] + 1) * m * k];
        let pb = &bv[ib[bi] * k * n..(ib[bi] + 1) * k * n];
        gemm(pa, pb, cb, m, k, n);
    }
    Ok(c)
}

pub fn matmul(a: &Args) -> R<HostTensor> {
    a.count(2, 2)?;
    let out = a.out(0)?;
    let c = matmul_f32(a.input(0)?, a.input(1)?, out)?;
    Ok(from_f32(out, &c))
}

/// `x @ w^T + b` over the last dim of x.
pub fn linear(a: &Args) -> R<HostTensor> {
    a.count(2, 3)?;
    let (x, w, out) = (a.input(0)?, a.input(1)?, a.out(0)?);
    let ws = w.shape();
    let (n, k) = match ws {
        [n, k] => (*n, *k),
        [k] => (1, *k),
        _ => return Err(format!("linear weight must be 1-D or 2-D, got {ws:?}")),
    };
    if x.shape().last() != Some(&k) {
        return Err(format!("linear: x {:?} with weight {ws:?}", x.shape()));
    }
    let m = x.numel() / k.max(1);
    if m * n != out.numel() {
        return Err(format!("linear gives {} elements, output {out}", m * n));
    }
    let xv = f32s(x);
    // w^T as [k, n]
    let wv = f32s(w);
    let mut wt = vec![0f32; k * n];
    for j in 0..n {
        for p in 0..k {
            wt[p * n + j] = wv[j * k + p];
        }
    }
    let mut c = vec![0f32; m * n];
    gemm(&xv, &wt, &mut c, m, k, n);
    if let Some(bias) = a.ins.get(2) {
        if bias.numel() != n {
            return Err(format!("linear bias {:?} for {n} outputs", bias.shape()));
        }
        let bv = f32s(bias);
        for row in c.chunks_mut(n.max(1)) {
            for (c, b) in row.iter_mut().zip(&bv) {
                *c += b;
            }
        }
    }
    Ok(from_f32(out, &c))
}

/// `beta * input + alpha * (m1 @ m2)` with `input` broadcast to the result.
fn scaled_add(a: &Args, beta: f32, alpha: f32) -> R<HostTensor> {
    a.count(3, 3)?;
    let out = a.out(0)?;
    let prod = matmul_f32(a.input(1)?, a.input(2)?, out)?;
    let bias = a.input(0)?;
    let bv = f32s(bias);
    let map = broadcast_map(bias.shape(), &out.shape)?;
    let r: Vec<f32> = prod
        .iter()
        .zip(&map)
        .map(|(&p, &i)| {
            let s = alpha * p;
            if beta == 0.0 {
                s
            } else {
                beta * bv[i] + s
            }
        })
        .collect();
    Ok(from_f32(out, &r))
}

pub fn addmm(a: &Args, beta: f64, alpha: f64) -> R<HostTensor> {
    for (i, what) in [(1, "mat1"), (2, "mat2")] {
        super::data::want_rank(what, a.input(i)?, 2)?;
    }
    scaled_add(a, beta as f32, alpha as f32)
}

pub fn baddbmm(a: &Args, beta: f64, alpha: f64) -> R<HostTensor> {
    for (i, what) in [(1, "batch1"), (2, "batch2")] {
        super::data::want_rank(what, a.input(i)?, 3)?;
    }
    scaled_add(a, beta as f32, alpha as f32)
}
