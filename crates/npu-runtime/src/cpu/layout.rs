//! Weights laid out for the CPU kernels at prepare. A linear's weight is stored [N, K]
//! (PyTorch's [out, in]), so a GEMM reads it as a column-major B, and the `gemm` crate packs
//! such a B again on every call: at small M that costs more than the product (M = 16,
//! K = 192, N = 768: 0.087 ms column-major, 0.021 ms row-major; M = 4, K = 384, N = 1536:
//! 0.028 ms row-major against ~0.12 in the dot-product GEMV; Xeon, 2 threads). An f32 weight
//! that only such GEMMs read gets a row-major [K, N] copy here, once, and the steps read that
//! instead. One-row GEMMs keep the [N, K] rows, which their GEMV streams contiguously
//! (`gemm::gemv_kernel`; the gemm crate is no faster there).
//!
//! Where [`gemm_packed`] runs (AVX2+FMA without AVX-512), the copy is not row-major but that
//! kernel's panels: the same weights, the same rewritten bindings (shape [K, N], strides
//! [N, 1], which stay inside the larger packed buffer), and the slot marked packed so that
//! only the packed kernel reads it.

use super::{gemm_packed, Buf};
use crate::error::Result;
use npu_ir::DType;
use npu_program::program::{Binding, Kernel, Slot};
use npu_program::Program;
use std::collections::HashMap;
use std::sync::Arc;

/// The fewest output rows for which a GEMM's B is transposed (see the module docs).
const MIN_ROWS: usize = 2;

/// `[K, N]` when `b` is a whole f32 weight `w` read as its transpose (shape [K, N], strides
/// [1, K], no offset) by a GEMM with at least MIN_ROWS rows.
fn transposed_use(program: &Program, b: &Binding, out_rows: usize) -> Option<[usize; 2]> {
    let Slot::Weight(w) = b.slot else {
        return None;
    };
    let slot = program.weights.get(w as usize)?;
    let [k, n] = b.shape[..] else { return None };
    let fits = b.dtype == DType::F32
        && slot.dtype == DType::F32
        && b.byte_offset == 0
        && b.strides == [1, k]
        && slot.shape.iter().product::<usize>() == k * n
        && out_rows >= MIN_ROWS;
    fits.then_some([k, n])
}

/// Rewrites `program`'s GEMMs to read row-major copies of their transposed f32 weights and
/// puts the copies in `weights` (the slot keeps its index; its old buffer stays with whoever
/// else shares it). A weight any other step reads, or a GEMM reads otherwise, is left as is.
/// Where [`gemm_packed::enabled`], the copies are packed panels instead; the result says,
/// per weight slot, whether it holds them (every step that reads such a slot is a GEMM
/// reading it as B).
pub(crate) fn transpose_linear_weights(
    program: &mut Program,
    weights: &mut [Arc<Buf>],
) -> Result<Vec<bool>> {
    let pack = gemm_packed::enabled();
    let mut packed = vec![false; weights.len()];
    // weight slot -> [K, N], or None once a use does not fit
    let mut plan: HashMap<u32, Option<[usize; 2]>> = HashMap::new();
    for step in &program.steps {
        let b_index = matches!(step.kernel, Kernel::Gemm { .. }).then_some(1);
        for (i, x) in step.inputs.iter().chain(&step.outputs).enumerate() {
            let Slot::Weight(w) = x.slot else { continue };
            let rows = step.outputs[0]
                .shape
                .iter()
                .rev()
                .nth(1)
                .copied()
                .unwrap_or(1);
            let fit = (b_index == Some(i))
                .then(|| transposed_use(program, x, rows))
                .flatten();
            let entry = plan.entry(w).or_insert(fit);
            if *entry != fit {
                *entry = None;
            }
        }
    }
    for (&w, kn) in &plan {
        let Some([k, n]) = *kn else { continue };
        let src = weights[w as usize].bytes();
        let what = format!("weight '{}' transposed", program.weights[w as usize].name);
        let t = if pack {
            let mut t = Buf::try_zeros(gemm_packed::packed_len(k, n) * 4, &what)?;
            gemm_packed::pack_transposed(f32s(src), k, n, f32s_mut(t.bytes_mut()));
            packed[w as usize] = true;
            t
        } else {
            let mut t = Buf::try_zeros(k * n * 4, &what)?;
            let dst = t.bytes_mut();
            // src is [N, K] row-major: element (j, kk) -> dst (kk, j)
            for j in 0..n {
                for kk in 0..k {
                    let s = (j * k + kk) * 4;
                    let d = (kk * n + j) * 4;
                    dst[d..d + 4].copy_from_slice(&src[s..s + 4]);
                }
            }
            t
        };
        weights[w as usize] = Arc::new(t);
        program.weights[w as usize].shape = vec![k, n];
    }
    for step in &mut program.steps {
        if !matches!(step.kernel, Kernel::Gemm { .. }) {
            continue;
        }
        let b = &mut step.inputs[1];
        if let Slot::Weight(w) = b.slot {
            if let Some(Some([_, n])) = plan.get(&w) {
                b.strides = vec![*n, 1];
            }
        }
    }
    Ok(packed)
}

/// A Buf's bytes as floats, in place.
fn f32s(bytes: &[u8]) -> &[f32] {
    // SAFETY: every bit pattern is an f32, and `align_to` only returns the aligned middle.
    let (head, floats, _) = unsafe { bytes.align_to::<f32>() };
    assert!(head.is_empty(), "a Buf starts 8-byte aligned");
    floats
}

/// A Buf's bytes as floats, in place. The floats start at its first byte (a Buf starts
/// 8-byte aligned): the packed panels' offset, found again from the buffer's address at run
/// time, depends on that.
fn f32s_mut(bytes: &mut [u8]) -> &mut [f32] {
    // SAFETY: as `f32s`.
    let (head, floats, _) = unsafe { bytes.align_to_mut::<f32>() };
    assert!(head.is_empty(), "a Buf starts 8-byte aligned");
    floats
}

#[cfg(test)]
mod tests {
    use crate::cpu::CpuExecutable;
    use crate::{Executable, HostTensor, MemoryWeights};
    use npu_ir::DType;
    use npu_program::program::{
        Binding, IoTensor, Kernel, Recipe, Slot, SourceTensor, Step, WeightSlot,
    };
    use npu_program::Program;
    use std::collections::HashMap;

    fn io(name: &str, shape: &[usize]) -> IoTensor {
        IoTensor {
            name: name.into(),
            shape: shape.to_vec(),
            dtype: DType::F32,
            storage: DType::F32,
            donates_input: None,
        }
    }

    fn bind(slot: Slot, shape: &[usize], strides: &[usize]) -> Binding {
        Binding {
            slot,
            byte_offset: 0,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            dtype: DType::F32,
        }
    }

    /// out [m, 3] = x [m, 2] @ w^T with w [3, 2] as a linear stores it: the same values
    /// whether the weight is transposed at prepare (m = 6) or read as stored (m = 1, GEMV).
    fn linear(m: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let gemm = Kernel::Gemm {
            alpha: 1.0,
            beta: 1.0,
            act: None,
            residual: false,
            norm: None,
        };
        let program = Program {
            model_name: "linear".into(),
            target: "cpu".into(),
            compute_dtype: DType::F32,
            inputs: vec![io("x", &[m, 2])],
            outputs: vec![io("y", &[m, 3])],
            sources: vec![SourceTensor {
                key: "w".into(),
                shape: vec![3, 2],
                dtype: DType::F32,
            }],
            weights: vec![WeightSlot {
                name: "w".into(),
                shape: vec![3, 2],
                dtype: DType::F32,
                recipe: Recipe::Load { source: 0 },
            }],
            constants: vec![],
            arena_bytes: 0,
            steps: vec![Step {
                kernel: gemm,
                inputs: vec![
                    bind(Slot::Input(0), &[m, 2], &[2, 1]),
                    bind(Slot::Weight(0), &[2, 3], &[1, 2]),
                ],
                outputs: vec![bind(Slot::Output(0), &[m, 3], &[3, 1])],
                origin: "linear".into(),
            }],
        };
        let x: Vec<f32> = (0..m * 2).map(|i| i as f32 * 0.5 - 2.0).collect();
        let w = vec![1.0, -2.0, 0.5, 3.0, -1.5, 0.25];
        let weights = MemoryWeights(HashMap::from([(
            "w".to_string(),
            HostTensor::from_f32(vec![3, 2], &w),
        )]));
        let mut exe = CpuExecutable::new(program, &weights).expect("prepare");
        let b_strides = &exe.program().steps[0].inputs[1].strides;
        assert_eq!(b_strides, &if m >= 2 { vec![3, 1] } else { vec![1, 2] });
        let xt = HostTensor::from_f32(vec![m, 2], &x);
        let out = exe.run_all(&[("x", &xt)]).expect("run");
        (x, w, out[0].1.to_f32_vec())
    }

    #[test]
    fn transposed_weights_give_the_same_products() {
        for m in [6, 1] {
            let (x, w, got) = linear(m);
            for i in 0..m {
                for j in 0..3 {
                    let want = x[i * 2] * w[j * 2] + x[i * 2 + 1] * w[j * 2 + 1];
                    assert_eq!(got[i * 3 + j], want, "m {m}: ({i}, {j})");
                }
            }
        }
    }

    /// How the awkward-shape test stores A [b, m, k].
    #[derive(Clone, Copy, Debug)]
    enum ALayout {
        Dense,
        /// Rows k + 3 floats apart.
        Padded,
        /// Stored [b, k, m]: unit row stride, so A is gathered into a dense copy.
        Transposed,
    }

    /// y [b, m, n] = relu(alpha x wᵀ + beta bias) through a prepared executable (the weight
    /// packed where `gemm_packed` runs, else transposed) against sums in f64, over awkward
    /// sizes, a batch, f16 A and A through strided views. The bound: (k + 2) u of
    /// sum |alpha a w| for the product (alpha rounds once more, see `gemm_packed`'s test) and
    /// 2 u of |beta bias| for its addition; ReLU moves no value further from the reference.
    #[test]
    fn linears_of_awkward_shapes_match_f64() {
        use npu_ir::UnaryOp;
        use ALayout::*;
        let cases = [
            (1, 197, 77, 45, DType::F32, Dense),
            (2, 7, 300, 33, DType::F32, Padded),
            (1, 13, 64, 17, DType::F32, Transposed),
            (2, 5, 31, 16, DType::F16, Dense),
        ];
        for (batch, m, k, n, a_dt, layout) in cases {
            let (alpha, beta) = (0.5f32, 2.0f32);
            let (stored, strides) = match layout {
                Dense => (vec![batch, m, k], vec![m * k, k, 1]),
                Padded => (vec![batch, m, k + 3], vec![m * (k + 3), k + 3, 1]),
                Transposed => (vec![batch, k, m], vec![k * m, 1, m]),
            };
            let mut x_io = io("x", &stored);
            (x_io.dtype, x_io.storage) = (a_dt, a_dt);
            let mut x_bind = bind(Slot::Input(0), &[batch, m, k], &strides);
            x_bind.dtype = a_dt;
            let program = Program {
                model_name: "linear".into(),
                target: "cpu".into(),
                compute_dtype: DType::F32,
                inputs: vec![x_io, io("bias", &[n])],
                outputs: vec![io("y", &[batch, m, n])],
                sources: vec![SourceTensor {
                    key: "w".into(),
                    shape: vec![n, k],
                    dtype: DType::F32,
                }],
                weights: vec![WeightSlot {
                    name: "w".into(),
                    shape: vec![n, k],
                    dtype: DType::F32,
                    recipe: Recipe::Load { source: 0 },
                }],
                constants: vec![],
                arena_bytes: 0,
                steps: vec![Step {
                    kernel: Kernel::Gemm {
                        alpha,
                        beta,
                        act: Some(UnaryOp::Relu),
                        residual: false,
                        norm: None,
                    },
                    inputs: vec![
                        x_bind,
                        bind(Slot::Weight(0), &[k, n], &[1, k]),
                        bind(Slot::Input(1), &[batch, m, n], &[0, 0, 1]),
                    ],
                    outputs: vec![bind(Slot::Output(0), &[batch, m, n], &[m * n, n, 1])],
                    origin: "linear".into(),
                }],
            };
            let vals = |len: usize, seed: usize| -> Vec<f32> {
                (0..len)
                    .map(|i| (((i * 7919 + seed * 104729) % 2003) as f32 / 1001.0) - 1.0)
                    .collect()
            };
            let x_stored = vals(stored.iter().product(), 1);
            let w = vals(n * k, 2);
            let bias = vals(n, 3);
            let weights = MemoryWeights(HashMap::from([(
                "w".to_string(),
                HostTensor::from_f32(vec![n, k], &w),
            )]));
            let mut exe = CpuExecutable::new(program, &weights).expect("prepare");
            assert_eq!(exe.packed_weights[0], crate::cpu::gemm_packed::enabled());
            let xt = HostTensor::from_f32_as(a_dt, stored.clone(), &x_stored);
            let bt = HostTensor::from_f32(vec![n], &bias);
            let out = exe.run_all(&[("x", &xt), ("bias", &bt)]).expect("run");
            let got = out[0].1.to_f32_vec();
            let x_as_run = xt.to_f32_vec(); // f16 A rounded as the kernel sees it
            let u = 2f64.powi(-24);
            for bi in 0..batch {
                for i in 0..m {
                    for j in 0..n {
                        let (mut sum, mut mag) = (0f64, 0f64);
                        for kk in 0..k {
                            let xa = x_as_run[bi * strides[0] + i * strides[1] + kk * strides[2]];
                            let p = f64::from(alpha) * f64::from(xa) * f64::from(w[j * k + kk]);
                            sum += p;
                            mag += p.abs();
                        }
                        let bias_term = f64::from(beta) * f64::from(bias[j]);
                        let want = (sum + bias_term).max(0.0);
                        let tol = (k as f64 + 2.0) * u * mag + 2.0 * u * bias_term.abs();
                        let g = f64::from(got[(bi * m + i) * n + j]);
                        assert!(
                            (g - want).abs() <= tol,
                            "{batch}x{m}x{k}x{n} {a_dt} {layout:?} ({bi}, {i}, {j}): {g} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
