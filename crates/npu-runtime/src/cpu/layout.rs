//! Weights laid out for the CPU kernels at prepare. A linear's weight is stored [N, K]
//! (PyTorch's [out, in]), so a GEMM reads it as a column-major B, and the `gemm` crate packs
//! such a B again on every call: at small M that costs more than the product (M = 16,
//! K = 192, N = 768: 0.087 ms column-major, 0.021 ms row-major; M = 4, K = 384, N = 1536:
//! 0.028 ms row-major against ~0.12 in the dot-product GEMV; Xeon, 2 threads). An f32 weight
//! that only such GEMMs read gets a row-major [K, N] copy here, once, and the steps read that
//! instead. One-row GEMMs keep the [N, K] rows, which their GEMV streams contiguously
//! (`gemm::gemv_kernel`; the gemm crate is no faster there).

use super::Buf;
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
pub(crate) fn transpose_linear_weights(
    program: &mut Program,
    weights: &mut [Arc<Buf>],
) -> Result<()> {
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
    Ok(())
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
}
