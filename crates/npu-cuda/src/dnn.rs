//! Convolutions through cuDNN (loaded at the first convolution planned on it, if installed).
//!
//! One `cudnnConvolutionBiasActivationForward` computes `act(conv(x, w) + z + bias)` with
//! f32 accumulation and one rounding to the output's dtype, reading the input where it lies:
//! no im2col matrix is written and read back (on ResNet-50 batch 64 that matrix is ~3 GB of
//! traffic a run). `act` is ReLU (NaN kept) or the identity, `z` the residual or nothing.
//!
//! A planned call owns its descriptors (destroyed on drop) and launches against pointers
//! resolved from its `locs` before each run, as `LtCall` does. Planning tries the heuristic's
//! candidates on zeroed buffers in order and keeps the first that runs, so an unsupported
//! configuration is found at prepare time and the caller falls back to its own kernels.

use crate::device::Device;
use crate::error::{CudaError, CudaResult};
use crate::loc::Loc;
use crate::lt_tune::Scratch;
use cudarc::cudnn::result as dnn;
use cudarc::cudnn::sys;
use npu_ir::DType;
use std::ffi::{c_int, c_void};

/// Workspace a planned call may take (in the step's scratch).
const WORKSPACE_MAX: usize = 256 << 20;

/// Heuristic candidates tried per convolution.
const CANDIDATES: usize = 8;

/// A 4-D operand as cuDNN indexes it: [N, C, H, W] sizes and element strides.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Nchw {
    pub dims: [usize; 4],
    pub strides: [usize; 4],
}

impl Nchw {
    /// Elements from the first to one past the last.
    fn span(&self) -> usize {
        1 + self
            .dims
            .iter()
            .zip(&self.strides)
            .map(|(&d, &s)| d.saturating_sub(1) * s)
            .sum::<usize>()
    }
}

/// What one planned convolution computes.
pub(crate) struct DnnConvSpec {
    pub dtype: DType,
    pub x: Nchw,
    pub y: Nchw,
    /// The residual added before the activation.
    pub z: Option<Nchw>,
    /// The filter's [O, C / groups, kh, kw], stored channels-last ([O, kh, kw, C / groups]).
    pub w: [usize; 4],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
    pub relu: bool,
    /// Where x, w, z (y's place without a residual), the bias vector, y and the workspace lie.
    pub locs: [Loc; 6],
}

/// A planned cuDNN convolution.
pub(crate) struct DnnConv {
    x: sys::cudnnTensorDescriptor_t,
    y: sys::cudnnTensorDescriptor_t,
    z: sys::cudnnTensorDescriptor_t,
    bias: sys::cudnnTensorDescriptor_t,
    w: sys::cudnnFilterDescriptor_t,
    conv: sys::cudnnConvolutionDescriptor_t,
    act: sys::cudnnActivationDescriptor_t,
    algo: sys::cudnnConvolutionFwdAlgo_t,
    /// Workspace bytes the chosen algorithm needs (at `locs[5]`).
    pub workspace: u64,
    /// x, w, z (y itself without a residual), bias, y, workspace.
    pub locs: [Loc; 6],
    pub ptrs: [u64; 6],
    alpha2: f32,
}

// SAFETY: descriptors are plain host objects used by one thread at a time.
unsafe impl Send for DnnConv {}

impl Drop for DnnConv {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created in `DnnConv::new` and is destroyed once here;
        // a null one (creation failed part way) is skipped.
        unsafe {
            for t in [self.x, self.y, self.z, self.bias] {
                if !t.is_null() {
                    let _ = dnn::destroy_tensor_descriptor(t);
                }
            }
            if !self.w.is_null() {
                let _ = dnn::destroy_filter_descriptor(self.w);
            }
            if !self.conv.is_null() {
                let _ = dnn::destroy_convolution_descriptor(self.conv);
            }
            if !self.act.is_null() {
                let _ = sys::cudnnDestroyActivationDescriptor(self.act);
            }
        }
    }
}

fn dnn_err(what: &str, e: dnn::CudnnError) -> CudaError {
    CudaError::Dnn {
        what: what.into(),
        message: format!("{:?}", e.0),
    }
}

/// A size or stride as cuDNN's `int`.
fn int(v: usize, what: &str) -> CudaResult<c_int> {
    c_int::try_from(v).map_err(|_| CudaError::Dnn {
        what: what.into(),
        message: format!("{v} does not fit a 32-bit int"),
    })
}

fn set_tensor(
    desc: sys::cudnnTensorDescriptor_t,
    dt: sys::cudnnDataType_t,
    t: &Nchw,
    what: &str,
) -> CudaResult<()> {
    let [n, c, h, w] = t.dims;
    let [ns, cs, hs, ws] = t.strides;
    let i = |v| int(v, what);
    // SAFETY: a live descriptor; plain integer arguments.
    unsafe {
        dnn::set_tensor4d_descriptor_ex(
            desc,
            dt,
            [i(n)?, i(c)?, i(h)?, i(w)?],
            [i(ns)?, i(cs)?, i(hs)?, i(ws)?],
        )
    }
    .map_err(|e| dnn_err(what, e))
}

impl DnnConv {
    /// Plans `spec`, or `Ok(None)` where cuDNN runs none of its candidates for it (the
    /// caller then takes its own kernels). Errors are failures of the library itself.
    pub fn plan(dev: &Device, spec: &DnnConvSpec) -> CudaResult<Option<DnnConv>> {
        let handle = dev.dnn()?;
        let mut c = DnnConv::new(spec)?;
        let mut found: c_int = 0;
        // SAFETY: zeroed structs are valid outputs for the heuristic query.
        let mut perf: [sys::cudnnConvolutionFwdAlgoPerf_t; CANDIDATES] =
            unsafe { std::mem::zeroed() };
        // SAFETY: live handle and descriptors; `perf` holds CANDIDATES results.
        unsafe {
            dnn::get_convolution_forward_algorithm(
                handle,
                c.x,
                c.w,
                c.conv,
                c.y,
                CANDIDATES as c_int,
                &mut found,
                perf.as_mut_ptr(),
            )
        }
        .map_err(|e| dnn_err("the algorithm heuristic", e))?;
        // The identity activation is fused only by the precomputed implicit GEMM.
        let precomp_only = !spec.relu;
        // The heuristic's candidates in its order, with the workspace each needs.
        let cands: Vec<(sys::cudnnConvolutionFwdAlgo_t, usize)> = perf
            [..found.clamp(0, CANDIDATES as c_int) as usize]
            .iter()
            .filter(|r| r.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS)
            .filter(|r| {
                !precomp_only
                    || r.algo
                        == sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
            })
            .filter_map(|r| {
                // SAFETY: live handle and descriptors.
                let ws = unsafe {
                    dnn::get_convolution_forward_workspace_size(handle, c.x, c.w, c.conv, c.y, r.algo)
                };
                ws.ok().filter(|&ws| ws <= WORKSPACE_MAX).map(|ws| (r.algo, ws))
            })
            .collect();
        let Some(ws_max) = cands.iter().map(|&(_, ws)| ws).max() else {
            return Ok(None);
        };
        let el = spec.dtype.size_bytes() as u64;
        let [o, cg, kh, kw] = spec.w;
        let sizes = [
            spec.x.span() as u64 * el,
            (o * cg * kh * kw) as u64 * el,
            spec.z.map_or(0, |z| z.span() as u64 * el),
            o as u64 * el,
            spec.y.span() as u64 * el,
            ws_max as u64,
        ];
        let bufs = Scratch::zeroed(&sizes, "a cuDNN trial")?;
        c.ptrs.copy_from_slice(&bufs.0);
        if spec.z.is_none() {
            c.ptrs[2] = c.ptrs[4];
        }
        for (algo, ws) in cands {
            c.algo = algo;
            c.workspace = ws as u64;
            if c.launch(dev).is_ok() && dev.stream.synchronize().is_ok() {
                // the trial buffers are freed below; runs resolve `locs` before launching
                c.ptrs = [0; 6];
                return Ok(Some(c));
            }
        }
        Ok(None)
    }

    /// The descriptors of `spec`, algorithm not yet chosen.
    fn new(spec: &DnnConvSpec) -> CudaResult<DnnConv> {
        let dt = match spec.dtype {
            DType::F16 => sys::cudnnDataType_t::CUDNN_DATA_HALF,
            DType::BF16 => sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16,
            other => {
                return Err(CudaError::Dnn {
                    what: "a convolution".into(),
                    message: format!("{other:?} is not planned on cuDNN"),
                })
            }
        };
        let tensor = |what: &str| {
            dnn::create_tensor_descriptor().map_err(|e| dnn_err(&format!("creating {what}"), e))
        };
        let mut c = DnnConv {
            x: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            z: std::ptr::null_mut(),
            bias: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
            act: std::ptr::null_mut(),
            algo: sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
            workspace: 0,
            locs: spec.locs,
            ptrs: [0; 6],
            alpha2: if spec.z.is_some() { 1.0 } else { 0.0 },
        };
        c.x = tensor("the input descriptor")?;
        set_tensor(c.x, dt, &spec.x, "the input descriptor")?;
        c.y = tensor("the output descriptor")?;
        set_tensor(c.y, dt, &spec.y, "the output descriptor")?;
        c.z = tensor("the residual descriptor")?;
        set_tensor(
            c.z,
            dt,
            spec.z.as_ref().unwrap_or(&spec.y),
            "the residual descriptor",
        )?;
        let [o, cg, kh, kw] = spec.w;
        c.bias = tensor("the bias descriptor")?;
        let bias = Nchw {
            dims: [1, o, 1, 1],
            strides: [o, 1, 1, 1],
        };
        set_tensor(c.bias, dt, &bias, "the bias descriptor")?;
        c.w = dnn::create_filter_descriptor().map_err(|e| dnn_err("creating the filter", e))?;
        let i = |v, what| int(v, what);
        // SAFETY: a live descriptor; plain integer arguments.
        unsafe {
            dnn::set_filter4d_descriptor(
                c.w,
                dt,
                sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC,
                [
                    i(o, "filter")?,
                    i(cg, "filter")?,
                    i(kh, "filter")?,
                    i(kw, "filter")?,
                ],
            )
        }
        .map_err(|e| dnn_err("the filter descriptor", e))?;
        c.conv = dnn::create_convolution_descriptor()
            .map_err(|e| dnn_err("creating the convolution descriptor", e))?;
        let w = "the convolution window";
        let [ph, pw, sh, sw, dh, dw, g] = [
            spec.padding[0],
            spec.padding[1],
            spec.stride[0],
            spec.stride[1],
            spec.dilation[0],
            spec.dilation[1],
            spec.groups,
        ]
        .map(|v| int(v, w));
        let (ph, pw, sh, sw, dh, dw, g) = (ph?, pw?, sh?, sw?, dh?, dw?, g?);
        // SAFETY: a live descriptor; plain arguments.
        unsafe {
            dnn::set_convolution2d_descriptor(
                c.conv,
                ph,
                pw,
                sh,
                sw,
                dh,
                dw,
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
            )
            .and_then(|()| {
                dnn::set_convolution_math_type(c.conv, sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH)
            })
            .and_then(|()| dnn::set_convolution_group_count(c.conv, g))
        }
        .map_err(|e| dnn_err(w, e))?;
        let mut act = std::ptr::null_mut();
        // SAFETY: creates one descriptor, stored for drop.
        unsafe { sys::cudnnCreateActivationDescriptor(&mut act) }
            .result()
            .map_err(|e| dnn_err("creating the activation", e))?;
        c.act = act;
        let mode = if spec.relu {
            sys::cudnnActivationMode_t::CUDNN_ACTIVATION_RELU
        } else {
            sys::cudnnActivationMode_t::CUDNN_ACTIVATION_IDENTITY
        };
        // SAFETY: a live descriptor; NaN propagates as through our own ReLU.
        unsafe {
            sys::cudnnSetActivationDescriptor(
                c.act,
                mode,
                sys::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
                0.0,
            )
        }
        .result()
        .map_err(|e| dnn_err("the activation descriptor", e))?;
        Ok(c)
    }

    /// Enqueues the convolution on the device's stream (or into the graph being captured).
    pub fn launch(&self, dev: &Device) -> CudaResult<()> {
        let handle = dev.dnn()?;
        let alpha1 = 1.0f32;
        let [x, w, z, bias, y, ws] = self.ptrs;
        // SAFETY: pointers were resolved against live buffers laid out as the descriptors
        // say; the workspace holds `self.workspace` bytes.
        unsafe {
            dnn::convolution_bias_activation_forward(
                handle,
                &alpha1 as *const f32 as *const c_void,
                self.x,
                x as *const c_void,
                self.w,
                w as *const c_void,
                self.conv,
                self.algo,
                ws as *mut c_void,
                self.workspace as usize,
                &self.alpha2 as *const f32 as *const c_void,
                self.z,
                z as *const c_void,
                self.bias,
                bias as *const c_void,
                self.act,
                self.y,
                y as *mut c_void,
            )
        }
        .map_err(|e| dnn_err("a convolution", e))
    }
}
