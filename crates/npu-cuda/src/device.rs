//! The CUDA device: context, one stream, the cuBLASLt handle, device memory and the
//! compiled kernel library. Everything here uses the driver API through cudarc's dynamic
//! loading, so the crate builds and links without CUDA.

use crate::error::{CudaError, CudaResult};
use crate::launch::dtype_code;
use crate::nvrtc;
use cudarc::cublaslt::sys as ltsys;
use cudarc::driver::{result, sys, CudaContext, CudaFunction, CudaModule, CudaStream};
use npu_ir::DType;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// The kernels of the static library (kernels/*.cu), by name.
pub(crate) const LIBRARY_KERNELS: &[&str] = &[
    "k_copy",
    "k_fill",
    "k_embedding",
    "k_index_copy",
    "k_rope",
    "k_rope_cache",
    "k_rope_cache8",
    "k_rope_cache_dec",
    "k_softmax",
    "k_rms_norm",
    "k_layer_norm",
    "k_reduce",
    "k_pool2d",
    "k_max_pool3_16",
    "k_max_pool3_nhwc8",
    "k_adaptive_avg_pool2d",
    "k_adaptive_avg_pool2d_warp",
    "k_clear_err",
    "k_copy_bytes",
    "k_gemm",
    "k_epilogue",
    "k_epilogue_rms",
    "k_conv_epilogue",
    "k_im2col",
    "k_gemv",
    "k_gemv16",
    "k_gemv16_rope",
    "k_gemv16p",
    "k_gemv16p_rope",
    "k_im2col2",
    "k_im2col8",
    "k_conv_epilogue2",
    "k_attn",
    "k_attn_combine",
    "k_attn_dec",
    "k_attn_dec_mma",
    "k_attn_tiles",
    "k_attn_mma",
    "k_conv_direct",
    "k_im2col_nhwc",
    "k_act_rows16",
];

/// Kernels with an instance per 16-bit float dtype besides the generic one (kernels/common.cuh,
/// `dt_of`): generic, bf16, f16. `Device::func_dt` picks among them.
pub(crate) const DTYPE_INSTANCES: &[[&str; 3]] = &[
    ["k_rope_cache", "k_rope_cache_bf16", "k_rope_cache_f16"],
    ["k_rope_cache8", "k_rope_cache8_bf16", "k_rope_cache8_f16"],
    [
        "k_rope_cache_dec",
        "k_rope_cache_dec_bf16",
        "k_rope_cache_dec_f16",
    ],
    ["k_rms_norm", "k_rms_norm_bf16", "k_rms_norm_f16"],
    ["k_gemv16", "k_gemv16_bf16", "k_gemv16_f16"],
    ["k_gemv16_rope", "k_gemv16_rope_bf16", "k_gemv16_rope_f16"],
    ["k_gemv16p", "k_gemv16p_bf16", "k_gemv16p_f16"],
    [
        "k_gemv16p_rope",
        "k_gemv16p_rope_bf16",
        "k_gemv16p_rope_f16",
    ],
    [
        "k_epilogue_rms",
        "k_epilogue_rms_bf16",
        "k_epilogue_rms_f16",
    ],
];

/// `name`'s instance for one 16-bit float dtype (`DTYPE_INSTANCES`) where `dtypes`, the kernel
/// dtype codes of every operand that instance fixes, all are that dtype and instances are
/// `enabled`; else `name`, the generic instance.
fn instance_name<'n>(name: &'n str, dtypes: &[i32], enabled: bool) -> &'n str {
    let Some(instances) = DTYPE_INSTANCES.iter().find(|i| i[0] == name) else {
        return name;
    };
    let Some((&d, rest)) = dtypes.split_first() else {
        return name;
    };
    if !enabled || rest.iter().any(|&x| x != d) {
        name
    } else if d == dtype_code(DType::BF16) {
        instances[1]
    } else if d == dtype_code(DType::F16) {
        instances[2]
    } else {
        name
    }
}

/// Every function of the kernel library: `LIBRARY_KERNELS` and the dtype instances.
fn library_functions() -> Vec<&'static str> {
    let instances = DTYPE_INSTANCES.iter().flat_map(|[_, b, f]| [*b, *f]);
    LIBRARY_KERNELS.iter().copied().chain(instances).collect()
}

pub(crate) fn library_source() -> String {
    [
        crate::elementwise::common_source().as_str(),
        include_str!("kernels/basic.cu"),
        include_str!("kernels/gemm.cu"),
        include_str!("kernels/attention.cu"),
        include_str!("kernels/conv.cu"),
    ]
    .join("\n")
}

type FuncAttr = sys::CUfunction_attribute;

fn func_attribute(f: Func, a: FuncAttr) -> Result<i32, cudarc::driver::DriverError> {
    // SAFETY: a valid function handle (its module lives as long as the device); reads one
    // attribute.
    unsafe { result::function::get_function_attribute(f.0, a) }
}

/// Sets one of a library function's attributes (a shared-memory limit or preference), the
/// error naming `what`.
fn set_func_attribute(f: Func, a: FuncAttr, value: i32, what: impl Into<String>) -> CudaResult<()> {
    // SAFETY: a valid function handle (its module lives as long as the device); the attributes
    // set here bound or steer its launches' shared memory, nothing it already holds.
    unsafe { result::function::set_function_attribute(f.0, a, value) }
        .map_err(|e| CudaError::driver(what, e))
}

/// `NPU_CUDA_SMEM_OPTIN`: bytes of shared memory a block may opt into at most, below what
/// the GPU allows (unset, empty or not a number: no limit of ours).
fn smem_optin_override() -> Option<u32> {
    std::env::var("NPU_CUDA_SMEM_OPTIN")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A raw function handle; valid while its module (kept in `Device::modules`) lives.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Func(pub sys::CUfunction);
// SAFETY: CUfunction handles are plain driver handles usable from any thread bound to the
// context; the module that owns them lives as long as the device.
unsafe impl Send for Func {}
unsafe impl Sync for Func {}

pub struct Device {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    /// Made at the first GEMM planned: loading cuBLASLt costs start-up time that a program
    /// without GEMMs does not need.
    lt: OnceLock<LtHandle>,
    /// Made at the first convolution planned on cuDNN (`None` inside: not installed).
    dnn: OnceLock<Option<DnnHandle>>,
    pub(crate) arch: (i32, i32),
    pub(crate) sms: i32,
    /// L2 cache bytes.
    pub(crate) l2_bytes: u64,
    /// Shared memory bytes a block may opt into (`NPU_CUDA_SMEM_OPTIN` lowers it, so that
    /// tests on a large GPU plan and launch as on a smaller one).
    pub(crate) smem_optin: u32,
    /// Shared memory bytes an SM holds for its resident blocks.
    pub(crate) smem_per_sm: u32,
    /// Kernels are launched as programmatic dependents of the one before them (compute
    /// capability 9.0 and later, unless `NPU_CUDA_PDL=0`): every kernel of ours starts with
    /// `pdl_enter()` (kernels/common.cuh), which waits for its predecessor before touching
    /// memory, so only launch latency and block ramp overlap.
    pub(crate) pdl: bool,
    /// cuBLASLt algorithms are chosen by timing (`lt_tune`), unless `NPU_CUDA_LT_TUNE=0`.
    pub(crate) lt_tune: bool,
    /// Decode attention over 16-bit caches takes the tensor-core kernel `k_attn_dec_mma`,
    /// unless `NPU_CUDA_DEC_MMA=0` (then `k_attn_dec`, for comparisons).
    pub(crate) dec_mma: bool,
    /// Kernels in `DTYPE_INSTANCES` take their per-dtype instance where the operands allow,
    /// unless `NPU_CUDA_DTYPE_KERNELS=0` (then the generic one, for comparisons).
    pub(crate) dtype_kernels: bool,
    /// Which 16-bit convolutions go to cuDNN where it is installed (`NPU_CUDA_CUDNN`).
    pub(crate) cudnn: CudnnUse,
    /// The algorithm chosen per matmul description (`None`: cuBLASLt supports none).
    pub(crate) lt_algos:
        Mutex<HashMap<crate::lt_tune::TuneKey, Option<ltsys::cublasLtMatmulAlgo_t>>>,
    pub(crate) name: String,
    library: HashMap<&'static str, Func>,
    modules: Mutex<Vec<Arc<CudaModule>>>,
    /// Generated modules (elementwise kernels) by source hash.
    generated: Mutex<HashMap<u64, Vec<(String, Func)>>>,
    /// Wall time of each start-up phase, in order (see [`Device::startup`]).
    startup: Mutex<Vec<(&'static str, f64)>>,
}

/// Which convolutions are planned on cuDNN (`plan/conv_dnn.rs`), from `NPU_CUDA_CUDNN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CudnnUse {
    /// `0`: none (the im2col + cuBLASLt path, for comparisons).
    Off,
    /// The default: packed channels-last 16-bit ones with ReLU or no activation whose im2col
    /// matrix would be large (`plan/conv_dnn.rs`), where cuDNN is installed and runs them.
    Auto,
    /// `require`: every such convolution whatever its size, and a missing library or a
    /// configuration cuDNN does not run is an error instead of a fallback (for tests that
    /// must exercise cuDNN).
    Require,
}

impl CudnnUse {
    fn from_env() -> CudnnUse {
        match std::env::var("NPU_CUDA_CUDNN").as_deref() {
            Ok("0") => CudnnUse::Off,
            Ok("require") => CudnnUse::Require,
            _ => CudnnUse::Auto,
        }
    }
}

pub(crate) struct LtHandle(pub ltsys::cublasLtHandle_t);
// SAFETY: the handle is used only from the thread that runs the executable at a time
// (executables are `Send`, not shared), as cuBLASLt allows.
unsafe impl Send for LtHandle {}
unsafe impl Sync for LtHandle {}

pub(crate) struct DnnHandle(pub cudarc::cudnn::sys::cudnnHandle_t);
// SAFETY: as `LtHandle`: one thread uses it at a time.
unsafe impl Send for DnnHandle {}
unsafe impl Sync for DnnHandle {}

impl Device {
    /// Opens device 0, or says why there is none. Loads the driver and the kernel library
    /// (from the CUBIN cache when it holds it); NVRTC, cuBLASLt and cuDNN are loaded when
    /// first needed.
    pub fn open() -> CudaResult<Arc<Device>> {
        let mut phases = Vec::new();
        let mut t = Instant::now();
        let mut lap = |what: &'static str, phases: &mut Vec<(&'static str, f64)>| {
            phases.push((what, t.elapsed().as_secs_f64() * 1e3));
            t = Instant::now();
        };
        // SAFETY: only probes whether the shared library can be opened (cudarc's loader
        // panics on a missing one).
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(CudaError::NoDevice(
                "the CUDA driver library (libcuda.so) was not found".into(),
            ));
        }
        result::init().map_err(|e| CudaError::NoDevice(format!("cuInit failed: {e:?}")))?;
        let n = CudaContext::device_count()
            .map_err(|e| CudaError::NoDevice(format!("cannot count devices: {e:?}")))?;
        if n < 1 {
            return Err(CudaError::NoDevice("the driver reports 0 devices".into()));
        }
        lap("driver", &mut phases);
        let ctx = CudaContext::new(0).map_err(|e| CudaError::driver("opening device 0", e))?;
        // SAFETY: this backend never uses cudarc's tracked slices; raw allocations only.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(|e| CudaError::driver("creating a stream", e))?;
        let arch = ctx
            .compute_capability()
            .map_err(|e| CudaError::driver("compute capability", e))?;
        let dev_attr = |a, what: &str| {
            ctx.attribute(a)
                .map(|v| v.max(0) as u32)
                .map_err(|e| CudaError::driver(what.to_string(), e))
        };
        let sms = dev_attr(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            "SM count",
        )? as i32;
        let l2_bytes = u64::from(dev_attr(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
            "L2 cache size",
        )?);
        let smem_optin = dev_attr(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            "shared memory a block may opt into",
        )?
        .min(smem_optin_override().unwrap_or(u32::MAX));
        let smem_per_sm = dev_attr(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            "shared memory an SM holds",
        )?;
        let name = ctx.name().unwrap_or_else(|_| "unknown".into());
        lap("context", &mut phases);
        let mut dev = Device {
            ctx,
            stream,
            lt: OnceLock::new(),
            dnn: OnceLock::new(),
            arch,
            sms,
            l2_bytes,
            smem_optin,
            smem_per_sm,
            pdl: arch.0 >= 9 && std::env::var("NPU_CUDA_PDL").map_or(true, |v| v != "0"),
            lt_tune: std::env::var("NPU_CUDA_LT_TUNE").map_or(true, |v| v != "0"),
            dec_mma: std::env::var("NPU_CUDA_DEC_MMA").map_or(true, |v| v != "0"),
            dtype_kernels: std::env::var("NPU_CUDA_DTYPE_KERNELS").map_or(true, |v| v != "0"),
            cudnn: CudnnUse::from_env(),
            lt_algos: Mutex::new(HashMap::new()),
            name,
            library: HashMap::new(),
            modules: Mutex::new(Vec::new()),
            generated: Mutex::new(HashMap::new()),
            startup: Mutex::new(Vec::new()),
        };
        if crate::timeline::wanted() {
            // the record buffer's address is compiled into the kernels: it comes first
            dev.bind()?;
            crate::timeline::init()?;
        }
        let names = library_functions();
        let funcs = dev.load(&library_source(), "the kernel library", &names)?;
        for (name, f) in names.into_iter().zip(funcs) {
            dev.library.insert(name, f);
        }
        // The kernels whose dynamic shared memory may pass the default 48 KB a block (k_attn
        // at head dim 256, k_attn_dec_mma's 69.8 KB of tiles, a GEMV row of up to 12288
        // staged with its norm weight; k_gemv16_rope's 160 static bytes put its 48 KB past
        // the default) opt into all the device allows besides their static bytes, no more:
        // asking for a fixed size above it fails on GPUs with less (99 KB a block on
        // consumer Ampere and Ada, 64 KB on Turing). Planners check each launch against the
        // result (`smem_cap`).
        let big_smem = [
            "k_attn",
            "k_attn_dec_mma",
            "k_gemv",
            "k_gemv16",
            "k_gemv16_rope",
            "k_gemv16p",
            "k_gemv16p_rope",
        ];
        let instances = DTYPE_INSTANCES.iter().filter(|i| big_smem.contains(&i[0]));
        for k in big_smem
            .into_iter()
            .chain(instances.flat_map(|i| [i[1], i[2]]))
        {
            let f = dev.library[k];
            let what = || format!("shared memory limit of {k}");
            let fixed = func_attribute(f, FuncAttr::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
                .map_err(|e| CudaError::driver(what(), e))?;
            let cap = dev.smem_optin.saturating_sub(fixed.max(0) as u32);
            set_func_attribute(
                f,
                FuncAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                cap as i32,
                what(),
            )?;
        }
        // The GEMVs prefer the largest shared-memory carveout. An SM's split between L1 and
        // shared memory changes only when it has drained, and in a decode step the q/k/v GEMV
        // (which runs the RoPE / cache group) is followed by the attention's 69.8 KB blocks:
        // under a GEMV's small default carveout they waited for the GEMV's blocks to leave,
        // and their pre-wait reads ran on the critical path (attention 4.1 -> 6.5 us a layer,
        // twentieth session's timeline, docs/cuda.md). An SM's carveout is what the blocks
        // already on it chose, and the q/k/v GEMV's blocks land beside the down GEMV's, so
        // every GEMV kind prefers it, not the q/k/v one alone (gate/up's launch pays a little
        // for the smaller L1, yet the step was slower without its preference: exp-wide).
        // Only the largest: below it the attention's blocks, whose kernel wants 228 KB for
        // three an SM, waited as before (exp-cpct). `NPU_CUDA_GEMV_CARVEOUT=0` leaves the
        // driver's choice.
        if std::env::var("NPU_CUDA_GEMV_CARVEOUT").map_or(true, |v| v != "0") {
            let gemvs = dev
                .library
                .iter()
                .filter(|(k, _)| k.starts_with("k_gemv16"));
            for (k, &f) in gemvs {
                set_func_attribute(
                    f,
                    FuncAttr::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                    100,
                    format!("shared-memory carveout of {k}"),
                )?;
            }
        }
        lap("kernel library", &mut phases);
        *dev.startup.get_mut().unwrap_or_else(|e| e.into_inner()) = phases;
        Ok(Arc::new(dev))
    }

    /// The cuBLASLt handle, made (and the library loaded) at the first call.
    pub(crate) fn lt(&self) -> CudaResult<ltsys::cublasLtHandle_t> {
        if let Some(h) = self.lt.get() {
            return Ok(h.0);
        }
        let t = Instant::now();
        // SAFETY: only probes whether the shared library can be opened (cudarc's loader
        // panics on a missing one).
        if !unsafe { ltsys::is_culib_present() } {
            return Err(CudaError::MissingLibrary(
                "the cuBLASLt library (libcublasLt.so), needed for GEMMs,".into(),
            ));
        }
        self.bind()?;
        let h = cudarc::cublaslt::result::create_handle().map_err(|e| CudaError::Blas {
            what: "creating the handle".into(),
            message: format!("{e:?}"),
        })?;
        if let Err(other) = self.lt.set(LtHandle(h)) {
            // Another thread made one first: keep theirs.
            // SAFETY: `other` holds the handle made above, used by nobody.
            let _ = unsafe { cudarc::cublaslt::result::destroy_handle(other.0) };
        } else {
            self.record("cuBLASLt", t);
        }
        Ok(self.lt.get().map(|h| h.0).unwrap_or(h))
    }

    /// The cuDNN handle, made (and the library loaded) at the first call, bound to the
    /// device's stream; `MissingLibrary` where cuDNN is not installed.
    pub(crate) fn dnn(&self) -> CudaResult<cudarc::cudnn::sys::cudnnHandle_t> {
        let h = self.dnn.get_or_init(|| {
            let t = Instant::now();
            // SAFETY: only probes whether the shared library can be opened (cudarc's loader
            // panics on a missing one).
            if !unsafe { cudarc::cudnn::sys::is_culib_present() } {
                return None;
            }
            self.bind().ok()?;
            let h = cudarc::cudnn::result::create_handle().ok()?;
            // SAFETY: a live handle and the device's stream.
            if unsafe { cudarc::cudnn::result::set_stream(h, self.cu_stream() as _) }.is_err() {
                // SAFETY: made above, used by nobody.
                let _ = unsafe { cudarc::cudnn::result::destroy_handle(h) };
                return None;
            }
            self.record("cuDNN", t);
            Some(DnnHandle(h))
        });
        h.as_ref().map(|h| h.0).ok_or_else(|| {
            CudaError::MissingLibrary(
                "the cuDNN library (libcudnn.so.9 on the library path, e.g. from PyPI's \
                 nvidia-cudnn wheel; needed with NPU_CUDA_CUDNN=require)"
                    .into(),
            )
        })
    }

    fn record(&self, what: &'static str, since: Instant) {
        self.startup
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((what, since.elapsed().as_secs_f64() * 1e3));
    }

    /// Wall time of each start-up phase so far, in ms: the driver, the context, the kernel
    /// library (CUBIN cache or NVRTC), then cuBLASLt and generated kernels as they were
    /// first needed.
    pub fn startup(&self) -> Vec<(&'static str, f64)> {
        self.startup
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// An event with timing on (for elapsed times between two of them).
    pub(crate) fn timing_event(&self) -> CudaResult<cudarc::driver::CudaEvent> {
        self.ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| CudaError::driver("creating an event", e))
    }

    /// Records `e` on the run's stream; `in_capture`: as an event record node of the graph
    /// being captured, so a replay records it too (`CU_EVENT_RECORD_EXTERNAL`, which the
    /// driver refuses outside a capture).
    pub(crate) fn record_event(
        &self,
        e: &cudarc::driver::CudaEvent,
        in_capture: bool,
    ) -> CudaResult<()> {
        let flags = if in_capture {
            sys::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL as u32
        } else {
            0
        };
        // SAFETY: a live event and stream of this context.
        unsafe { sys::cuEventRecordWithFlags(e.cu_event(), self.cu_stream(), flags) }
            .result()
            .map_err(|e| CudaError::driver("recording an event", e))
    }

    pub(crate) fn bind(&self) -> CudaResult<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| CudaError::driver("binding the context", e))
    }

    pub(crate) fn func(&self, name: &str) -> Func {
        self.library[name]
    }

    /// `name`, or its instance for one 16-bit float dtype (`instance_name`; off with
    /// `NPU_CUDA_DTYPE_KERNELS=0`).
    pub(crate) fn func_dt(&self, name: &str, dtypes: &[i32]) -> Func {
        self.func(instance_name(name, dtypes, self.dtype_kernels))
    }

    /// The library name of `func`; None for a generated (pointwise) kernel.
    pub(crate) fn func_name(&self, func: Func) -> Option<&'static str> {
        self.library
            .iter()
            .find(|(_, f)| f.0 == func.0)
            .map(|(n, _)| *n)
    }

    /// Whether `func` is the kernel `name` in any of its dtype instances.
    pub(crate) fn is_func(&self, func: Func, name: &str) -> bool {
        let same = |n: &str| self.func(n).0 == func.0;
        match DTYPE_INSTANCES.iter().find(|i| i[0] == name) {
            Some(i) => i.iter().any(|n| same(n)),
            None => same(name),
        }
    }

    /// The dynamic shared memory bytes a launch of `func` may ask for: what `Device::open`
    /// opted the large kernels into, the default 48 KB less its static bytes for the others.
    pub(crate) fn smem_cap(&self, func: Func) -> CudaResult<u32> {
        func_attribute(
            func,
            FuncAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        )
        .map(|v| v.max(0) as u32)
        .map_err(|e| CudaError::driver("reading a kernel's shared memory limit", e))
    }

    pub(crate) fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// Compiles (or takes from the disk cache) `src` and returns the named functions.
    pub(crate) fn load(&self, src: &str, what: &str, names: &[&str]) -> CudaResult<Vec<Func>> {
        let cubin = nvrtc::compile_cached(src, self.arch, what)?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
            .map_err(|e| CudaError::driver(format!("loading {what}"), e))?;
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            let f: CudaFunction = module
                .load_function(n)
                .map_err(|e| CudaError::driver(format!("finding {n} in {what}"), e))?;
            out.push(Func(f.cu_function()));
        }
        self.modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(module);
        Ok(out)
    }

    /// Generated kernels, compiled once per distinct source for the device's lifetime.
    pub(crate) fn load_generated(
        &self,
        src: &str,
        names: &[String],
    ) -> CudaResult<HashMap<String, Func>> {
        let key = nvrtc::fnv1a(src.as_bytes());
        if let Some(v) = self
            .generated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(v.iter().cloned().collect());
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let t = Instant::now();
        let funcs = self.load(src, "generated elementwise kernels", &refs)?;
        self.record("generated kernels", t);
        let v: Vec<(String, Func)> = names.iter().cloned().zip(funcs).collect();
        self.generated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, v.clone());
        Ok(v.into_iter().collect())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        if let Some(h) = self.lt.get() {
            // SAFETY: the handle was created by `lt` and nothing uses it after the device.
            let _ = unsafe { cudarc::cublaslt::result::destroy_handle(h.0) };
        }
        if let Some(Some(h)) = self.dnn.get() {
            // SAFETY: the handle was created by `dnn` and nothing uses it after the device.
            let _ = unsafe { cudarc::cudnn::result::destroy_handle(h.0) };
        }
    }
}

/// A device allocation, freed on drop.
pub(crate) struct DevBuf {
    pub ptr: u64,
    pub len: usize,
    dev: Arc<Device>,
}

impl DevBuf {
    /// A zeroed allocation of at least one byte.
    pub fn zeroed(dev: &Arc<Device>, len: usize, what: &str) -> CudaResult<DevBuf> {
        dev.bind()?;
        // SAFETY: plain allocation and memset of the new block.
        let ptr = unsafe { result::malloc_sync(len.max(256)) }
            .map_err(|e| CudaError::driver(format!("allocating {len} bytes for {what}"), e))?;
        unsafe { result::memset_d8_sync(ptr, 0, len.max(256)) }
            .map_err(|e| CudaError::driver(format!("zeroing {what}"), e))?;
        Ok(DevBuf {
            ptr,
            len,
            dev: dev.clone(),
        })
    }

    pub fn upload(&self, bytes: &[u8], what: &str) -> CudaResult<()> {
        let n = bytes.len().min(self.len);
        // SAFETY: the destination holds `len` bytes.
        unsafe { result::memcpy_htod_sync(self.ptr, &bytes[..n]) }
            .map_err(|e| CudaError::driver(format!("uploading {what}"), e))
    }

    pub fn download(&self, bytes: &mut [u8], what: &str) -> CudaResult<()> {
        let n = bytes.len().min(self.len);
        self.dev.bind()?;
        // SAFETY: the source holds `len` bytes.
        unsafe { result::memcpy_dtoh_sync(&mut bytes[..n], self.ptr) }
            .map_err(|e| CudaError::driver(format!("downloading {what}"), e))
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        let _ = self.dev.bind();
        // SAFETY: allocated by `zeroed`, freed once.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names of the `__global__` functions in `src` whose body does not begin with
    /// `pdl_enter();` or `pdl_enter_early();`, after nothing but L2 prefetches.
    fn kernels_without_pdl_enter(src: &str) -> Vec<String> {
        let mut missing = Vec::new();
        let mut rest = src;
        while let Some(at) = rest.find("__global__") {
            rest = &rest[at + "__global__".len()..];
            let Some(open) = rest.find('{') else { break };
            let head = &rest[..open];
            let name = head
                .split('(')
                .next()
                .and_then(|h| h.split_whitespace().last())
                .unwrap_or("?");
            // L2 prefetch statements may come first (kernels/common.cuh, prefetch_l2), and
            // copies of weights the planner proved read-only (kernels/gemm.cu, preload_*)
            let mut body = rest[open + 1..].trim_start();
            while ["prefetch_l2", "preload_", "NPU_TL_TOP"]
                .iter()
                .any(|p| body.starts_with(p))
            {
                body = body.split_once(';').map_or("", |(_, b)| b).trim_start();
            }
            // k_attn_dec_mma waits later where the planner proved its early reads safe
            // (`Planner::cache_written_before`): `if (!pre) pdl_wait();` and, in its body,
            // `if (pre) pdl_wait();` after the staging of its first tile (it waits without
            // triggering its dependents; kernels/attention.cu says why).
            let late =
                head.contains(" k_attn_dec_mma(") && body.starts_with("if (!pre) pdl_wait();");
            let enters = body.starts_with("pdl_enter();") || body.starts_with("pdl_enter_early();");
            if !enters && !late {
                missing.push(name.to_string());
            }
            rest = &rest[open + 1..];
        }
        missing
    }

    #[test]
    fn a_dtype_instance_needs_every_fixed_operand_in_its_dtype() {
        let (bf, h, f) = (
            dtype_code(DType::BF16),
            dtype_code(DType::F16),
            dtype_code(DType::F32),
        );
        assert_eq!(
            instance_name("k_rms_norm", &[bf, bf, bf], true),
            "k_rms_norm_bf16"
        );
        assert_eq!(
            instance_name("k_rms_norm", &[h, h, h], true),
            "k_rms_norm_f16"
        );
        // mixed, f32, none given, turned off, or a kernel without instances: generic
        assert_eq!(
            instance_name("k_rms_norm", &[bf, h, bf], true),
            "k_rms_norm"
        );
        assert_eq!(instance_name("k_rms_norm", &[f, f, f], true), "k_rms_norm");
        assert_eq!(instance_name("k_rms_norm", &[], true), "k_rms_norm");
        assert_eq!(instance_name("k_rms_norm", &[bf, bf], false), "k_rms_norm");
        assert_eq!(instance_name("k_copy", &[bf, bf], true), "k_copy");
    }

    /// Every dtype instance is a kernel of the library source, and its generic one is listed.
    #[test]
    fn dtype_instances_are_in_the_library() {
        let lib = super::library_source();
        for inst in super::DTYPE_INSTANCES {
            assert!(super::LIBRARY_KERNELS.contains(&inst[0]), "{}", inst[0]);
            for n in inst {
                let head = format!(" {n}(");
                let defined = lib
                    .lines()
                    .any(|l| l.contains("__global__ void") && l.contains(&head));
                assert!(defined, "{n}");
            }
        }
    }

    /// Launches are programmatic (`Device::pdl`), which is only sound when every kernel waits
    /// for its predecessor before touching memory.
    #[test]
    fn every_kernel_enters_through_pdl() {
        let lib = super::library_source();
        assert!(lib.matches("__global__").count() >= super::library_functions().len());
        assert_eq!(kernels_without_pdl_enter(&lib), Vec::<String>::new());
        let b = npu_program::program::Binding {
            slot: npu_program::program::Slot::Arena,
            byte_offset: 0,
            shape: vec![2, 3],
            strides: vec![3, 1],
            dtype: npu_ir::DType::F32,
        };
        let expr = npu_program::expr::Expr {
            code: vec![
                npu_program::expr::Instr::Load(0),
                npu_program::expr::Instr::Unary(npu_ir::UnaryOp::Relu),
            ],
        };
        let (code, _) = crate::elementwise::generate(&expr, std::slice::from_ref(&b), &b);
        assert_eq!(kernels_without_pdl_enter(&code), Vec::<String>::new());
        assert_eq!(
            kernels_without_pdl_enter("__global__ void k(int* p) { *p = 0; }"),
            vec!["k".to_string()]
        );
        assert_eq!(
            kernels_without_pdl_enter(
                "__global__ void k(int* p) { prefetch_l2(p, 16); pdl_enter(); *p = 0; }"
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            kernels_without_pdl_enter(
                "__global__ void k(int* p) { prefetch_l2(p, 16); *p = 0; pdl_enter(); }"
            ),
            vec!["k".to_string()]
        );
    }
}
