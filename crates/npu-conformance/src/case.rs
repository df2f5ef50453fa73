//! A conformance case: a one-step program whose every operand is a program input or output
//! seen through a binding (any shape, strides and offset over its own buffer), the host values
//! of its inputs, and optionally the values PyTorch gives (for the cases that pin its NaN and
//! rounding rules down to the bit).

use npu_ir::DType;
use npu_program::program::{dense_strides, Binding, IoTensor, Kernel, Slot, Step};
use npu_program::Program;
use npu_runtime::HostTensor;

/// Special values every pointwise op meets in the NaN/Inf cases.
pub const SPECIAL: [f32; 16] = [
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

/// A program input or output: a buffer of `buf` elements and the step's view of it.
#[derive(Debug, Clone)]
pub struct Operand {
    pub buf: Vec<usize>,
    pub dtype: DType,
    pub binding: Binding,
}

impl Operand {
    /// The buffer element behind logical index `idx` of the binding.
    pub fn offset(&self, idx: &[usize]) -> usize {
        let base = self.binding.byte_offset as usize / self.dtype.size_bytes();
        base + idx
            .iter()
            .zip(&self.binding.strides)
            .map(|(i, s)| i * s)
            .sum::<usize>()
    }

    pub fn shape(&self) -> &[usize] {
        &self.binding.shape
    }
}

/// One case of the suite.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub kernel: Kernel,
    /// Program inputs; the step binds the first `bound` of them (the rest are state the step
    /// writes through a donating output).
    pub ins: Vec<Operand>,
    pub outs: Vec<Operand>,
    /// Host values of each input buffer.
    pub values: Vec<HostTensor>,
    /// The input each output donates (the KV cache written in place).
    pub donate: Vec<Option<u32>>,
    pub bound: usize,
    /// Output 0's logical values as PyTorch computes them, where the f64 reference is not the
    /// point (NaN rules, double rounding).
    pub expected: Option<Vec<f32>>,
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

/// The strides of a channels-last [N, C, H, W] view of an [N, H, W, cp] buffer.
fn nhwc_strides([h, w, cp]: [usize; 3]) -> [usize; 4] {
    [h * w * cp, 1, w * cp, cp]
}

impl Case {
    pub fn new(name: impl Into<String>, kernel: Kernel) -> Case {
        Case {
            name: name.into(),
            kernel,
            ins: Vec::new(),
            outs: Vec::new(),
            values: Vec::new(),
            donate: Vec::new(),
            bound: usize::MAX,
            expected: None,
        }
    }

    /// A dense random input.
    pub fn input(self, rng: &mut Rng, shape: &[usize], dt: DType) -> Case {
        let s = dense_strides(shape);
        self.view(rng, shape, dt, shape, &s, 0)
    }

    /// A random [N, C, H, W] input stored channels-last with `cp` >= C channels per pixel
    /// (the `gpu` target's activation layout).
    pub fn nhwc_input(self, rng: &mut Rng, [n, c, h, w]: [usize; 4], dt: DType, cp: usize) -> Case {
        self.view(
            rng,
            &[n, h, w, cp],
            dt,
            &[n, c, h, w],
            &nhwc_strides([h, w, cp]),
            0,
        )
    }

    /// [`Case::nhwc_input`] with every 37th stored element a special value (NaN, +-Inf,
    /// +-0, ...), so a convolution's windows meet a few of them.
    pub fn nhwc_special_input(
        self,
        rng: &mut Rng,
        [n, c, h, w]: [usize; 4],
        dt: DType,
        cp: usize,
    ) -> Case {
        let buf = [n, h, w, cp];
        let v: Vec<f32> = (0..buf.iter().product::<usize>())
            .map(|i| {
                if i % 37 == 0 {
                    SPECIAL[(i / 37) % SPECIAL.len()]
                } else {
                    rng.f()
                }
            })
            .collect();
        self.view_of(&buf, dt, &v, &[n, c, h, w], &nhwc_strides([h, w, cp]), 0)
    }

    /// An [N, C, H, W] output stored channels-last with `cp` >= C channels per pixel.
    pub fn nhwc_output(self, [n, c, h, w]: [usize; 4], dt: DType, cp: usize) -> Case {
        self.output_view(&[n, h, w, cp], dt, &[n, c, h, w], &nhwc_strides([h, w, cp]))
    }

    /// A dense input stored transposed in its last two dims (a stride swap, as a linear's
    /// weight arrives).
    pub fn transposed(self, rng: &mut Rng, shape: &[usize], dt: DType) -> Case {
        let r = shape.len();
        let mut buf = shape.to_vec();
        buf.swap(r - 1, r - 2);
        let mut st = dense_strides(&buf);
        st.swap(r - 1, r - 2);
        self.view(rng, &buf, dt, shape, &st, 0)
    }

    /// An input buffer of `buf` elements, random in [-1, 1), seen through a strided view.
    pub fn view(
        self,
        rng: &mut Rng,
        buf: &[usize],
        dt: DType,
        shape: &[usize],
        strides: &[usize],
        off: usize,
    ) -> Case {
        let n: usize = buf.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.f()).collect();
        self.view_of(buf, dt, &v, shape, strides, off)
    }

    /// An input buffer holding `values`, seen through a strided view.
    pub fn view_of(
        mut self,
        buf: &[usize],
        dt: DType,
        values: &[f32],
        shape: &[usize],
        strides: &[usize],
        off: usize,
    ) -> Case {
        let i = self.ins.len() as u32;
        self.values
            .push(HostTensor::from_f32_as(dt, buf.to_vec(), values));
        self.ins.push(Operand {
            buf: buf.to_vec(),
            dtype: dt,
            binding: binding(Slot::Input(i), shape, strides, off, dt),
        });
        self
    }

    /// A dense input holding `values`.
    pub fn input_of(self, shape: &[usize], dt: DType, values: &[f32]) -> Case {
        let s = dense_strides(shape);
        self.view_of(shape, dt, values, shape, &s, 0)
    }

    /// A dense input of NaN, +-Inf, +-0 and other special values (cycling with period
    /// `period`, so operands of different periods meet in every combination), then random.
    pub fn special_input(self, rng: &mut Rng, shape: &[usize], dt: DType, period: usize) -> Case {
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
        self.input_of(shape, dt, &v)
    }

    /// A dense integer input.
    pub fn int_input(mut self, shape: &[usize], values: &[i64]) -> Case {
        let i = self.ins.len() as u32;
        self.values
            .push(HostTensor::from_i64(shape.to_vec(), values));
        let s = dense_strides(shape);
        self.ins.push(Operand {
            buf: shape.to_vec(),
            dtype: DType::I64,
            binding: binding(Slot::Input(i), shape, &s, 0, DType::I64),
        });
        self
    }

    pub fn output(self, shape: &[usize], dt: DType) -> Case {
        let s = dense_strides(shape);
        self.output_view(shape, dt, shape, &s)
    }

    /// An output buffer of `buf` elements written through a strided view (elements outside
    /// the view are not compared).
    pub fn output_view(
        mut self,
        buf: &[usize],
        dt: DType,
        shape: &[usize],
        strides: &[usize],
    ) -> Case {
        let i = self.outs.len() as u32;
        self.outs.push(Operand {
            buf: buf.to_vec(),
            dtype: dt,
            binding: binding(Slot::Output(i), shape, strides, 0, dt),
        });
        self.donate.push(None);
        self
    }

    /// The last input becomes state: the step does not bind it, and a new output donating it
    /// is written in place (the KV cache's `index_copy`).
    pub fn in_place(mut self) -> Case {
        let last = self.ins.len() - 1;
        self.bound = last;
        let mut out = self.ins[last].clone();
        out.binding.slot = Slot::Output(self.outs.len() as u32);
        self.outs.push(out);
        self.donate.push(Some(last as u32));
        self
    }

    /// Pins output 0 to PyTorch's values.
    pub fn expect(mut self, values: &[f32]) -> Case {
        self.expected = Some(values.to_vec());
        self
    }

    /// The operands the step binds.
    pub fn step_inputs(&self) -> &[Operand] {
        &self.ins[..self.bound.min(self.ins.len())]
    }

    /// The dtype the case is reported under (output 0's).
    pub fn dtype(&self) -> DType {
        self.outs.first().map_or(DType::F32, |o| o.dtype)
    }

    pub fn program(&self) -> Program {
        let io = |k: usize, t: &Operand, pre: &str, d: Option<u32>| IoTensor {
            name: format!("{pre}{k}"),
            shape: t.buf.clone(),
            dtype: t.dtype,
            storage: t.dtype,
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
                    .step_inputs()
                    .iter()
                    .map(|t| t.binding.clone())
                    .collect(),
                outputs: self.outs.iter().map(|t| t.binding.clone()).collect(),
                origin: self.name.clone(),
            }],
        }
    }
}
