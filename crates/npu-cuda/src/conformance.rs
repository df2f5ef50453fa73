//! Kernel conformance against the CPU reference: one-step programs of every kernel kind on
//! random data and shapes (odd sizes, broadcasts, transposed and strided operands, batch >
//! 1, long attention contexts), run on both backends and compared. Used by the GPU test and
//! by the `npu-cuda-check` binary.

use npu_ir::{BinaryOp, DType, TernaryOp, UnaryOp};
use npu_program::expr::{Expr, Instr};
use npu_program::program::{
    dense_strides, Binding, IoTensor, Kernel, PoolKind, ReduceOp, Slot, Step,
};
use npu_program::Program;

/// Special values every pointwise op meets in the NaN/Inf cases.
const SPECIAL: [f32; 16] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -0.5,
    2.5,
    -2.5,
    3.0,
    20.0,
    -20.0,
    1e-3,
    0.75,
];
use npu_runtime::{Backend, HostTensor, MemoryWeights};

/// One compared case.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub name: String,
    pub kind: &'static str,
    pub dtype: DType,
    /// max |cuda - cpu| / max |cpu| over every output.
    pub rel_err: f64,
    pub tol: f64,
    pub error: Option<String>,
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.rel_err <= self.tol
    }
}

/// A small deterministic generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-1, 1).
    pub fn f(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Builds a one-step program: every input is a program input holding `buf_shape`
/// elements and bound through (shape, strides, offset).
struct Case {
    name: String,
    kernel: Kernel,
    ins: Vec<(Vec<usize>, DType, Binding)>,
    outs: Vec<(Vec<usize>, DType, Binding)>,
    /// Host values for each input buffer.
    values: Vec<HostTensor>,
    /// Outputs that donate input i (the KV cache).
    donate: Vec<Option<u32>>,
    /// How many of the inputs the step binds (the rest are state the step writes).
    bound: usize,
}

fn binding(slot: Slot, shape: &[usize], strides: &[usize], off: usize, dt: DType) -> Binding {
    Binding {
        slot,
        byte_offset: (off * dt.size_bytes()) as u64,
        shape: shape.to_vec(),
        strides: strides.to_vec(),
        dtype: dt,
    }
}

impl Case {
    fn new(name: impl Into<String>, kernel: Kernel) -> Case {
        Case {
            name: name.into(),
            kernel,
            ins: Vec::new(),
            outs: Vec::new(),
            values: Vec::new(),
            donate: Vec::new(),
            bound: usize::MAX,
        }
    }

    /// A dense random input.
    fn input(self, rng: &mut Rng, shape: &[usize], dt: DType) -> Case {
        let s = dense_strides(shape);
        self.view(rng, shape, dt, shape, &s, 0)
    }

    /// An input buffer of `buf` elements seen through a strided view.
    fn view(
        mut self,
        rng: &mut Rng,
        buf: &[usize],
        dt: DType,
        shape: &[usize],
        strides: &[usize],
        off: usize,
    ) -> Case {
        let n: usize = buf.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.f()).collect();
        let i = self.ins.len() as u32;
        self.values
            .push(HostTensor::from_f32_as(dt, buf.to_vec(), &v));
        self.ins.push((
            buf.to_vec(),
            dt,
            binding(Slot::Input(i), shape, strides, off, dt),
        ));
        self
    }

    /// A dense input of NaN, +-Inf, +-0 and other special values (cycling with period
    /// `period`, so operands of different periods meet in every combination), then random.
    fn special_input(mut self, rng: &mut Rng, shape: &[usize], dt: DType, period: usize) -> Case {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|i| {
                if i < SPECIAL.len() * SPECIAL.len() {
                    SPECIAL[(i / period) % SPECIAL.len()]
                } else {
                    rng.f() * 4.0
                }
            })
            .collect();
        let i = self.ins.len() as u32;
        self.values
            .push(HostTensor::from_f32_as(dt, shape.to_vec(), &v));
        let s = dense_strides(shape);
        self.ins.push((
            shape.to_vec(),
            dt,
            binding(Slot::Input(i), shape, &s, 0, dt),
        ));
        self
    }

    fn int_input(mut self, shape: &[usize], values: Vec<i64>) -> Case {
        let i = self.ins.len() as u32;
        self.values
            .push(HostTensor::from_i64(shape.to_vec(), &values));
        let s = dense_strides(shape);
        self.ins.push((
            shape.to_vec(),
            DType::I64,
            binding(Slot::Input(i), shape, &s, 0, DType::I64),
        ));
        self
    }

    fn output(self, shape: &[usize], dt: DType) -> Case {
        let s = dense_strides(shape);
        self.output_view(shape, dt, shape, &s)
    }

    fn output_view(mut self, buf: &[usize], dt: DType, shape: &[usize], strides: &[usize]) -> Case {
        let i = self.outs.len() as u32;
        self.outs.push((
            buf.to_vec(),
            dt,
            binding(Slot::Output(i), shape, strides, 0, dt),
        ));
        self.donate.push(None);
        self
    }

    fn program(&self) -> Program {
        let io = |k: usize,
                  (shape, dt, _): &(Vec<usize>, DType, Binding),
                  pre: &str,
                  d: Option<u32>| IoTensor {
            name: format!("{pre}{k}"),
            shape: shape.clone(),
            dtype: *dt,
            storage: *dt,
            donates_input: d,
        };
        Program {
            model_name: self.name.clone(),
            target: "cpu".into(),
            compute_dtype: DType::F32,
            inputs: self
                .ins
                .iter()
                .enumerate()
                .map(|(k, t)| io(k, t, "in", None))
                .collect(),
            outputs: self
                .outs
                .iter()
                .enumerate()
                .map(|(k, t)| io(k, t, "out", self.donate[k]))
                .collect(),
            sources: Vec::new(),
            weights: Vec::new(),
            constants: Vec::new(),
            arena_bytes: 0,
            steps: vec![Step {
                kernel: self.kernel.clone(),
                inputs: self
                    .ins
                    .iter()
                    .take(self.bound)
                    .map(|t| t.2.clone())
                    .collect(),
                outputs: self.outs.iter().map(|t| t.2.clone()).collect(),
                origin: self.name.clone(),
            }],
        }
    }
}

fn tol(dt: DType) -> f64 {
    match dt {
        DType::BF16 => 1.6e-2,
        DType::F16 => 2e-3,
        _ => 2e-4,
    }
}

fn run_case(case: &Case, cpu: &dyn Backend, gpu: &dyn Backend) -> CaseResult {
    let p = case.program();
    let out_dt = case.outs.first().map_or(DType::F32, |o| o.1);
    let mut res = CaseResult {
        name: case.name.clone(),
        kind: case.kernel.kind(),
        dtype: out_dt,
        rel_err: f64::INFINITY,
        tol: tol(out_dt),
        error: None,
    };
    let names: Vec<String> = (0..case.values.len()).map(|k| format!("in{k}")).collect();
    let inputs: Vec<(&str, &HostTensor)> =
        names.iter().map(String::as_str).zip(&case.values).collect();
    let w = MemoryWeights::default();
    let run = |b: &dyn Backend| -> Result<Vec<(String, HostTensor)>, String> {
        let mut x = b.prepare(&p, &w).map_err(|e| e.to_string())?;
        // Twice: the second run replays the captured graph on the CUDA backend.
        let _ = x.run_all(&inputs).map_err(|e| e.to_string())?;
        x.run_all(&inputs).map_err(|e| e.to_string())
    };
    let (want, got) = match (run(cpu), run(gpu)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) => {
            res.error = Some(format!("cpu: {e}"));
            return res;
        }
        (_, Err(e)) => {
            res.error = Some(format!("cuda: {e}"));
            return res;
        }
    };
    let (mut max_err, mut max_ref) = (0f64, 0f64);
    for ((_, a), (_, b)) in want.iter().zip(&got) {
        for (x, y) in a.to_f32_vec().iter().zip(b.to_f32_vec()) {
            let (x, y) = (f64::from(*x), f64::from(y));
            // NaN in the same places, infinities equal, finite values within tolerance
            if x.is_nan() != y.is_nan() || ((x.is_infinite() || y.is_infinite()) && x != y) {
                max_err = f64::INFINITY;
            } else if x.is_finite() {
                max_err = max_err.max((x - y).abs());
                max_ref = max_ref.max(x.abs());
            }
        }
    }
    res.rel_err = max_err / max_ref.max(1e-6);
    res
}

fn cases(rng: &mut Rng, long: bool) -> Vec<Case> {
    use DType::{BF16, F16, F32};
    let mut v = Vec::new();
    let gemm = |alpha, beta, act| Kernel::Gemm {
        alpha,
        beta,
        act,
        residual: false,
        norm: None,
    };
    // GEMV (M = 1) on a transposed bf16 weight with bias, vectorized and odd K.
    for (dt, k, n) in [
        (BF16, 1536, 1000),
        (F16, 64, 333),
        (F32, 37, 19),
        (BF16, 1533, 77),
    ] {
        v.push(
            Case::new(
                format!("gemv {dt} 1x{k}x{n} bias+silu"),
                gemm(1.0, 1.0, Some(UnaryOp::Silu)),
            )
            .input(rng, &[1, k], dt)
            .view(rng, &[n, k], dt, &[k, n], &[1, k], 0)
            .view(rng, &[n], dt, &[1, n], &[0, 1], 0)
            .output(&[1, n], dt),
        );
    }
    // A residual stream as the bias (added to the rounded product): GEMV, cuBLASLt, SIMT.
    let residual = Kernel::Gemm {
        alpha: 1.0,
        beta: 1.0,
        act: None,
        residual: true,
        norm: None,
    };
    for (m, k, n) in [(1, 1536, 1536), (128, 1536, 256)] {
        v.push(
            Case::new(
                format!("gemm bf16 {m}x{k}x{n} wT + residual"),
                residual.clone(),
            )
            .input(rng, &[m, k], BF16)
            .view(rng, &[n, k], BF16, &[k, n], &[1, k], 0)
            .input(rng, &[m, n], BF16)
            .output(&[m, n], BF16),
        );
    }
    v.push(
        Case::new("gemm f16 strided a (SIMT) 5x7x3 + residual", residual)
            .view(rng, &[10, 9], F16, &[5, 3], &[2 * 9, 2], 1)
            .input(rng, &[3, 7], F16)
            .input(rng, &[5, 7], F16)
            .output(&[5, 7], F16),
    );
    // RMSNorm in the GEMM's prologue: k_gemv16's staging (decode, with a bias), and a
    // k_rms_norm launch into scratch before cuBLASLt (prefill) and the SIMT GEMM.
    for (m, k, n, dt, bias) in [
        (1, 1536, 2048, BF16, true),
        (128, 1536, 256, BF16, false),
        (5, 64, 40, F16, true),
    ] {
        let kern = Kernel::Gemm {
            alpha: 1.0,
            beta: 1.0,
            act: None,
            residual: false,
            norm: Some(1e-6),
        };
        let mut c = Case::new(
            format!(
                "gemm {dt} {m}x{k}x{n} rms_norm prologue{}",
                if bias { " + bias" } else { "" }
            ),
            kern,
        )
        .input(rng, &[m, k], dt)
        .view(rng, &[n, k], dt, &[k, n], &[1, k], 0);
        if bias {
            c = c.view(rng, &[n], dt, &[m, n], &[0, 1], 0);
        }
        v.push(c.input(rng, &[k], dt).output(&[m, n], dt));
    }
    // cuBLASLt GEMMs: prefill-like bf16 with a transposed weight, batched f32 with alpha.
    v.push(
        Case::new("gemm bf16 128x960x1536 wT bias", gemm(1.0, 1.0, None))
            .input(rng, &[128, 1536], BF16)
            .view(rng, &[960, 1536], BF16, &[1536, 960], &[1, 1536], 0)
            .view(rng, &[960], BF16, &[128, 960], &[0, 1], 0)
            .output(&[128, 960], BF16),
    );
    v.push(
        Case::new("gemm f32 batched 3x67x45x91 alpha", gemm(0.125, 0.0, None))
            .input(rng, &[3, 67, 91], F32)
            .input(rng, &[3, 91, 45], F32)
            .output(&[3, 67, 45], F32),
    );
    v.push(
        Case::new(
            "gemm f16 2x4x33x17 (b broadcast, relu)",
            gemm(1.0, 0.0, Some(UnaryOp::Relu)),
        )
        .input(rng, &[2, 4, 33, 40], F16)
        .input(rng, &[40, 17], F16)
        .output(&[2, 4, 33, 17], F16),
    );
    v.push(
        Case::new("gemm f32 strided a (SIMT) 5x7x3", gemm(1.0, 0.0, None))
            .view(rng, &[10, 9], F32, &[5, 3], &[2 * 9, 2], 1)
            .input(rng, &[3, 7], F32)
            .output_view(&[7, 5], F32, &[5, 7], &[1, 5]),
    );
    // Convolutions (im2col + cuBLASLt).
    let conv = |s, p, g, act| Kernel::Conv2d {
        stride: [s, s],
        padding: [p, p],
        dilation: [1, 1],
        groups: g,
        act,
    };
    v.push(
        Case::new(
            "conv f16 2x5x13x11 k3 s2 p1 bias relu",
            conv(2, 1, 1, Some(UnaryOp::Relu)),
        )
        .input(rng, &[2, 5, 13, 11], F16)
        .input(rng, &[7, 5, 3, 3], F16)
        .input(rng, &[7], F16)
        .output(&[2, 7, 7, 6], F16),
    );
    v.push(
        Case::new("conv f32 1x6x9x9 k3 groups 2", conv(1, 0, 2, None))
            .input(rng, &[1, 6, 9, 9], F32)
            .input(rng, &[4, 3, 3, 3], F32)
            .output(&[1, 4, 7, 7], F32),
    );
    // Grouped convolutions up to 1024 taps per group run as one direct kernel.
    v.push(
        Case::new(
            "conv f16 depthwise 2x32x15x13 k3 s2 p1 bias relu",
            conv(2, 1, 32, Some(UnaryOp::Relu)),
        )
        .input(rng, &[2, 32, 15, 13], F16)
        .input(rng, &[32, 1, 3, 3], F16)
        .input(rng, &[32], F16)
        .output(&[2, 32, 8, 7], F16),
    );
    v.push(
        Case::new(
            "conv bf16 depthwise x2 1x8x9x10 k5 p2 dilation 2",
            Kernel::Conv2d {
                stride: [1, 1],
                padding: [2, 4],
                dilation: [2, 2],
                groups: 8,
                act: None,
            },
        )
        .input(rng, &[1, 8, 9, 10], BF16)
        .input(rng, &[16, 1, 5, 5], BF16)
        .output(&[1, 16, 5, 10], BF16),
    );
    // 16-bit columns, eight per thread (columns a multiple of 8).
    v.push(
        Case::new(
            "conv f16 2x16x12x10 k3 p1 -> 24 (im2col8)",
            conv(1, 1, 1, None),
        )
        .input(rng, &[2, 16, 12, 10], F16)
        .input(rng, &[24, 16, 3, 3], F16)
        .output(&[2, 24, 12, 10], F16),
    );
    v.push(
        Case::new(
            "conv f32 x, bf16 w 1x8x17x16 k3 s2 p1 (im2col8 converting)",
            conv(2, 1, 1, Some(UnaryOp::Relu)),
        )
        .input(rng, &[1, 8, 17, 16], F32)
        .input(rng, &[12, 8, 3, 3], BF16)
        .output(&[1, 12, 9, 8], BF16),
    );
    // 1x1 convolutions: one GEMM batched over the images, no im2col.
    v.push(
        Case::new(
            "conv f16 1x1 4x96x8x8 -> 72 bias relu (batched GEMM)",
            conv(1, 0, 1, Some(UnaryOp::Relu)),
        )
        .input(rng, &[4, 96, 8, 8], F16)
        .input(rng, &[72, 96, 1, 1], F16)
        .input(rng, &[72], F16)
        .output(&[4, 72, 8, 8], F16),
    );
    v.push(
        Case::new(
            "conv f32 1x1 2x24x5x3 -> 8 (odd planes)",
            conv(1, 0, 1, None),
        )
        .input(rng, &[2, 24, 5, 3], F32)
        .input(rng, &[8, 24, 1, 1], F32)
        .output(&[2, 8, 5, 3], F32),
    );
    v.push(
        Case::new(
            "conv f32 groups 2 of 128 channels k3 (im2col)",
            conv(1, 1, 2, None),
        )
        .input(rng, &[1, 256, 6, 5], F32)
        .input(rng, &[8, 128, 3, 3], F32)
        .output(&[1, 8, 6, 5], F32),
    );
    v.push(
        Case::new(
            "conv bf16 3x64x7x7 1x1 (padded channels out)",
            conv(1, 0, 1, None),
        )
        .input(rng, &[3, 64, 7, 7], BF16)
        .input(rng, &[40, 64, 1, 1], BF16)
        .output_view(&[3, 64, 7, 7], BF16, &[3, 40, 7, 7], &[64 * 49, 49, 7, 1]),
    );
    // Pooling.
    v.push(
        Case::new(
            "maxpool f16 k3 s2 p1",
            Kernel::Pool2d {
                kind: PoolKind::Max,
                kernel: [3, 3],
                stride: [2, 2],
                padding: [1, 1],
                dilation: [1, 1],
            },
        )
        .input(rng, &[2, 3, 15, 14], F16)
        .output(&[2, 3, 8, 7], F16),
    );
    v.push(
        Case::new(
            "avgpool f32 k2 s2",
            Kernel::Pool2d {
                kind: PoolKind::Avg {
                    count_include_pad: false,
                    divisor: None,
                },
                kernel: [3, 3],
                stride: [2, 2],
                padding: [1, 1],
                dilation: [1, 1],
            },
        )
        .input(rng, &[1, 4, 9, 9], F32)
        .output(&[1, 4, 5, 5], F32),
    );
    v.push(
        Case::new(
            "adaptive avgpool bf16 7x5 -> 3x2",
            Kernel::AdaptiveAvgPool2d,
        )
        .input(rng, &[2, 3, 7, 5], BF16)
        .output(&[2, 3, 3, 2], BF16),
    );
    // Windows of 32 or more: one warp per output.
    v.push(
        Case::new(
            "adaptive avgpool f16 40x33 -> 1x1 (warp)",
            Kernel::AdaptiveAvgPool2d,
        )
        .input(rng, &[2, 24, 40, 33], F16)
        .output(&[2, 24, 1, 1], F16),
    );
    v.push(
        Case::new(
            "adaptive avgpool f32 20x17 -> 2x3 (warp)",
            Kernel::AdaptiveAvgPool2d,
        )
        .input(rng, &[1, 5, 20, 17], F32)
        .output(&[1, 5, 2, 3], F32),
    );
    // Fused elementwise with broadcasting and mixed dtypes.
    let ew = Expr {
        code: vec![
            Instr::Load(0),
            Instr::Unary(UnaryOp::Silu),
            Instr::Load(1),
            Instr::Binary(BinaryOp::Mul),
            Instr::Load(2),
            Instr::Binary(BinaryOp::Add),
            Instr::Clamp {
                min: Some(-0.5),
                max: Some(2.0),
            },
        ],
    };
    v.push(
        Case::new(
            "elementwise silu*b+c broadcast bf16",
            Kernel::Elementwise { expr: ew.clone() },
        )
        .input(rng, &[3, 17, 129], BF16)
        .view(rng, &[129], F32, &[3, 17, 129], &[0, 0, 1], 0)
        .view(rng, &[3, 1, 1], BF16, &[3, 17, 129], &[1, 0, 0], 0)
        .output(&[3, 17, 129], BF16),
    );
    let ew2 = Expr {
        code: vec![
            Instr::Load(0),
            Instr::Const(2.0),
            Instr::Binary(BinaryOp::Pow),
            Instr::Unary(UnaryOp::Gelu),
            Instr::Cast(F16),
            Instr::Load(1),
            Instr::Unary(UnaryOp::Exp),
            Instr::Binary(BinaryOp::Max),
        ],
    };
    v.push(
        Case::new(
            "elementwise gelu(x^2) max exp(y) f32 dense",
            Kernel::Elementwise { expr: ew2 },
        )
        .input(rng, &[1001], F32)
        .input(rng, &[1001], F32)
        .output(&[1001], F32),
    );
    pointwise_cases(rng, &mut v);
    // Row reductions.
    v.push(
        Case::new("softmax bf16 scale+mask", Kernel::Softmax { scale: 0.3 })
            .input(rng, &[2, 3, 5, 77], BF16)
            .view(rng, &[77], BF16, &[2, 3, 5, 77], &[0, 0, 0, 1], 0)
            .output(&[2, 3, 5, 77], BF16),
    );
    v.push(
        Case::new("rms_norm bf16 1536", Kernel::RmsNorm { eps: 1e-6 })
            .input(rng, &[7, 1536], BF16)
            .input(rng, &[1536], BF16)
            .output(&[7, 1536], BF16),
    );
    v.push(
        Case::new(
            "layer_norm f32 w+b 333",
            Kernel::LayerNorm {
                eps: 1e-5,
                has_weight: true,
                has_bias: true,
            },
        )
        .input(rng, &[5, 333], F32)
        .input(rng, &[333], F32)
        .input(rng, &[333], F32)
        .output(&[5, 333], F32),
    );
    v.push(
        Case::new(
            "reduce mean f16 2 trailing dims",
            Kernel::Reduce {
                op: ReduceOp::Mean,
                reduced: 2,
            },
        )
        .input(rng, &[4, 3, 7, 7], F16)
        .output(&[4, 3, 1, 1], F16),
    );
    v.push(
        Case::new(
            "reduce sum f32 transposed view",
            Kernel::Reduce {
                op: ReduceOp::Sum,
                reduced: 1,
            },
        )
        .view(rng, &[9, 6], F32, &[6, 9], &[1, 6], 0)
        .output(&[6], F32),
    );
    // Embedding, index_copy (KV cache, donated), rope.
    let ids: Vec<i64> = (0..13).map(|_| rng.below(1000) as i64).collect();
    v.push(
        Case::new("embedding bf16 1000x96", Kernel::Embedding)
            .input(rng, &[1000, 96], BF16)
            .int_input(&[1, 13], ids)
            .output(&[1, 13, 96], BF16),
    );
    {
        let (kvh, tmax, d, s) = (2, 300, 64, 7);
        let slots: Vec<i64> = (0..s as i64).map(|i| 100 + 3 * i).collect();
        // Program inputs [index, src, cache]; the step binds index and src and writes the
        // cache through the output that donates it.
        let mut c = Case::new(
            "index_copy bf16 into donated cache",
            Kernel::IndexCopy { axis: 2 },
        )
        .int_input(&[s], slots)
        .input(rng, &[1, kvh, s, d], BF16)
        .input(rng, &[1, kvh, tmax, d], BF16);
        c.bound = 2;
        let cache = c.ins[2].clone();
        let mut ob = cache.2.clone();
        ob.slot = Slot::Output(0);
        c.outs.push((cache.0.clone(), BF16, ob));
        c.donate.push(Some(2));
        v.push(c);
    }
    v.push(
        Case::new("rope f32 [1,12,5,128] with broadcast cos/sin", Kernel::Rope)
            .input(rng, &[1, 12, 5, 128], F32)
            .view(rng, &[5, 128], F32, &[1, 12, 5, 128], &[0, 0, 128, 1], 0)
            .view(rng, &[5, 128], F32, &[1, 12, 5, 128], &[0, 0, 128, 1], 0)
            .output(&[1, 12, 5, 128], F32),
    );
    // Attention: prefill with mask (GQA 6:1), causal without mask, decode with long contexts.
    let attn = |causal| Kernel::Attention {
        scale: 0.125,
        causal,
    };
    // `dead`: the mask's last rows attend to nothing (their output is zeros).
    let att = |rng: &mut Rng,
               name: String,
               [b, h, kvh, s, t, d]: [usize; 6],
               dt,
               mask: bool,
               causal: bool,
               dead: usize| {
        let mut c = Case::new(name, attn(causal))
            .input(rng, &[b, h, s, d], dt)
            .input(rng, &[b, kvh, t, d], dt)
            .input(rng, &[b, kvh, t, d], dt);
        if mask {
            // A causal-with-padding mask over the cache: finfo.min where not attended.
            let n = s * t;
            let start = t / 3;
            let vals: Vec<f32> = (0..n)
                .map(|i| {
                    let (r, c) = (i / t, i % t);
                    if c <= start + r && c >= 2 && r + dead < s {
                        0.0
                    } else {
                        -3.389_531_4e38
                    }
                })
                .collect();
            let i = c.ins.len() as u32;
            c.values
                .push(HostTensor::from_f32_as(dt, vec![1, 1, s, t], &vals));
            c.ins.push((
                vec![1, 1, s, t],
                dt,
                binding(Slot::Input(i), &[b, h, s, t], &[0, 0, t, 1], 0, dt),
            ));
        }
        c.output(&[b, h, s, d], dt)
    };
    v.push(att(
        rng,
        "attention bf16 prefill S=37 T=300 GQA 12/2 mask".into(),
        [1, 12, 2, 37, 300, 64],
        BF16,
        true,
        false,
        0,
    ));
    // Prefill on the GEMM path (16 or more rows, dense operands): f32, two batches, rows
    // that attend to nothing.
    v.push(att(
        rng,
        "attention f32 prefill S=40 T=96 GQA 6/2 B=2 dead rows".into(),
        [2, 6, 2, 40, 96, 48],
        F32,
        true,
        false,
        3,
    ));
    v.push(att(
        rng,
        "attention f32 causal S=65 T=65 D=80 B=2".into(),
        [2, 4, 4, 65, 65, 80],
        F32,
        false,
        true,
        0,
    ));
    v.push(att(
        rng,
        "attention f16 decode T=2500 D=128 GQA 12/2".into(),
        [1, 12, 2, 1, 2500, 128],
        F16,
        true,
        false,
        0,
    ));
    // the decode kernel at its edges: a head dim that is not a multiple of 32 with the
    // largest group, and one head per KV head without a mask
    v.push(att(
        rng,
        "attention f32 decode T=300 D=80 GQA 8/1 mask".into(),
        [2, 8, 1, 1, 300, 80],
        F32,
        true,
        false,
        0,
    ));
    v.push(att(
        rng,
        "attention bf16 decode T=77 D=64 MHA 4/4".into(),
        [1, 4, 4, 1, 77, 64],
        BF16,
        false,
        false,
        0,
    ));
    if long {
        v.push(att(
            rng,
            "attention bf16 decode T=32768 D=128 GQA 12/2".into(),
            [1, 12, 2, 1, 32768, 128],
            BF16,
            true,
            false,
            0,
        ));
    }
    // Copy (transposed view, dtype conversion) and fill.
    v.push(
        Case::new("copy bf16 transposed -> f32 dense", Kernel::Copy)
            .view(rng, &[33, 47], BF16, &[47, 33], &[1, 47], 0)
            .output(&[47, 33], F32),
    );
    v.push(Case::new("fill f16", Kernel::Fill { value: -1.25 }).output(&[3, 77], F16));
    v
}

/// Every op of the pointwise table on NaN, +-Inf, +-0 and friends: each unary op alone, each
/// binary op over every pair of special values, each ternary op over mixed triples; bool
/// results stored as bool; plus a bf16 chain of NaN-sensitive ops.
fn pointwise_cases(rng: &mut Rng, v: &mut Vec<Case>) {
    use DType::{Bool, BF16, F32};
    let n = SPECIAL.len();
    let out_dt = |bool_result: bool| if bool_result { Bool } else { F32 };
    for u in UnaryOp::all() {
        let expr = Expr {
            code: vec![Instr::Load(0), Instr::Unary(u)],
        };
        let is_bool = u.rule() == npu_ir::pointwise::Rule::Bool;
        v.push(
            Case::new(
                format!("pointwise {} nan/inf", u.name()),
                Kernel::Elementwise { expr },
            )
            .special_input(rng, &[n + 15], F32, 1)
            .output(&[n + 15], out_dt(is_bool)),
        );
    }
    for b in BinaryOp::all() {
        let expr = Expr {
            code: vec![Instr::Load(0), Instr::Load(1), Instr::Binary(b)],
        };
        let is_bool = b.rule() == npu_ir::pointwise::Rule::Bool;
        v.push(
            Case::new(
                format!("pointwise {} nan/inf pairs", b.name()),
                Kernel::Elementwise { expr },
            )
            .special_input(rng, &[n * n + 7], F32, n)
            .special_input(rng, &[n * n + 7], F32, 1)
            .output(&[n * n + 7], out_dt(is_bool)),
        );
    }
    for t in TernaryOp::all() {
        let expr = Expr {
            code: vec![
                Instr::Load(0),
                Instr::Load(1),
                Instr::Load(2),
                Instr::Ternary(t),
            ],
        };
        v.push(
            Case::new(
                format!("pointwise {} nan/inf triples", t.name()),
                Kernel::Elementwise { expr },
            )
            .special_input(rng, &[n * n], F32, n)
            .special_input(rng, &[n * n], F32, 1)
            .special_input(rng, &[n * n], F32, 3)
            .output(&[n * n], F32),
        );
    }
    let chain = Expr {
        code: vec![
            Instr::Load(0),
            Instr::Unary(UnaryOp::Relu),
            Instr::Load(1),
            Instr::Binary(BinaryOp::Max),
            Instr::Clamp {
                min: Some(-1.0),
                max: Some(1.0),
            },
            Instr::Load(0),
            Instr::Load(1),
            Instr::Binary(BinaryOp::Ne),
            Instr::Const(7.0),
            Instr::Ternary(TernaryOp::Where),
        ],
    };
    v.push(
        Case::new(
            "pointwise relu/max/clamp/ne/where bf16 nan/inf",
            Kernel::Elementwise { expr: chain },
        )
        .special_input(rng, &[n * n], BF16, n)
        .special_input(rng, &[n * n], BF16, 1)
        .output(&[n * n], BF16),
    );
}

/// Runs every case on `gpu` and the CPU reference. `long` adds the 32k-context decode.
pub fn run_all(gpu: &dyn Backend, seed: u64, long: bool) -> Vec<CaseResult> {
    let cpu = npu_runtime::CpuBackend::new();
    let mut rng = Rng::new(seed);
    cases(&mut rng, long)
        .iter()
        .map(|c| run_case(c, &cpu, gpu))
        .collect()
}

#[cfg(test)]
mod tests {
    /// The harness itself: the CPU against itself agrees exactly on every case.
    #[test]
    fn cases_build_and_run_on_the_cpu() {
        let cpu = npu_runtime::CpuBackend::new();
        for r in super::run_all(&cpu, 7, false) {
            assert!(r.error.is_none(), "{}: {:?}", r.name, r.error);
            assert_eq!(r.rel_err, 0.0, "{}", r.name);
        }
    }
}
