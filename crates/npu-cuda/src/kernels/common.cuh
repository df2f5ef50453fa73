// Shared device helpers: strided tensor descriptors, dtype-generic loads and stores with
// round-to-nearest-even on store (no CUDA headers needed: conversions are bit-exact code).
#define MAXR 8
#define NPU_INF __int_as_float(0x7f800000)
typedef unsigned long long u64;
typedef long long i64;

struct TD {
  u64 ptr;
  int dt;
  int rank;
  i64 sh[MAXR];
  i64 st[MAXR];
};

// dtype codes (must match the Rust side, dtype_code()).
#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2
#define DT_F64 3
#define DT_I64 4
#define DT_I32 5
#define DT_I16 6
#define DT_I8 7
#define DT_U8 8
#define DT_BOOL 9

// Programmatic dependent launch (sm_90 and later). Every kernel calls pdl_enter() as its first
// statement: it waits until the grid before it in the stream has completed and its writes are
// visible, and only then lets the next grid's blocks be scheduled (k_attn_dec_mma calls
// pdl_wait(), which waits the same but leaves the next grid to be scheduled as its blocks
// exit). With the launches made programmatic (device.rs, `Device::pdl`), a kernel's launch
// and block ramp overlap the previous kernel's tail instead of following it; without the
// attribute both instructions are no-ops.
// The wait comes before any global memory access (L2 prefetches aside, below), so no kernel
// reads or writes memory that the one before it is still using. Where the trigger sits was
// measured (Qwen2.5-1.5B decode, H200, nineteenth session): before the wait +0.10 ms a step,
// after a GEMV block's last weights +0.02, at every block's exit +0.09; only the decode
// attention gains by not triggering (pdl_wait).
__device__ __forceinline__ void pdl_wait_raw() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger_raw() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#ifdef NPU_TL_BUF
// The timeline (timeline.rs, NPU_CUDA_TIMELINE=1): a block's record, 48 bytes.
struct NpuTlRec {
  unsigned long long grid, t0, t1, t2;
  unsigned block, smid, nblocks, pad0;
};
static_assert(sizeof(NpuTlRec) == 48, "timeline.rs reads 48-byte records");
__shared__ NpuTlRec* npu_tl_slot;
__device__ __forceinline__ unsigned long long npu_tl_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned npu_tl_tid() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
// mode 1: waits and triggers as pdl_enter; 2: triggers and waits as pdl_enter_early; 0: only the
// record (the kernel calls pdl_wait later)
struct NpuTlScope {
  __device__ __forceinline__ explicit NpuTlScope(int mode) {
    const bool first = npu_tl_tid() == 0;
    if (first) {
      const unsigned i = atomicAdd((unsigned*)NPU_TL_BUF, 1u);
      NpuTlRec* r = i < NPU_TL_CAP ? (NpuTlRec*)(NPU_TL_BUF + 64) + i : nullptr;
      if (r) {
        unsigned long long g;
        unsigned sm;
        asm volatile("mov.u64 %0, %%gridid;" : "=l"(g));
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        r->grid = g;
        r->block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        r->smid = sm;
        r->nblocks = gridDim.x * gridDim.y * gridDim.z;
        r->t0 = npu_tl_now();
        r->t1 = 0;
        r->t2 = 0;
      }
      npu_tl_slot = r;
    }
    if (mode == 2) pdl_trigger_raw();
    if (mode != 0) {
      pdl_wait_raw();
      if (first && npu_tl_slot) npu_tl_slot->t1 = npu_tl_now();
    }
    if (mode == 1) pdl_trigger_raw();
    __syncthreads();
  }
  __device__ __forceinline__ ~NpuTlScope() {
    NpuTlRec* r = npu_tl_slot;
    if (r && (npu_tl_tid() & 31) == 0) atomicMax(&r->t2, npu_tl_now());
  }
};
#endif
__device__ __forceinline__ void pdl_wait() {
  pdl_wait_raw();
#ifdef NPU_TL_BUF
  if (npu_tl_tid() == 0 && npu_tl_slot) npu_tl_slot->t1 = npu_tl_now();
#endif
}
__device__ __forceinline__ void pdl_enter() {
  pdl_wait_raw();
  pdl_trigger_raw();
}
// The trigger before the wait: the next grid's blocks may be scheduled while this kernel's
// predecessor still runs (that grid's own wait still waits for this one's completion). For
// short kernels whose successor is long to ramp: the generated elementwise kernels, so that
// the decode step's down GEMV is resident, and copies its first weight rows, while the
// gate/up GEMV drains (docs/cuda.md, exp-ewtrig). Two such kernels in a row let three grids
// share the SMs: still correct (each grid waits for its predecessor's completion, which comes
// after that one's own wait), but the waiting blocks hold their slots.
__device__ __forceinline__ void pdl_enter_early() {
  pdl_trigger_raw();
  pdl_wait_raw();
}
#ifdef NPU_TL_BUF
#define pdl_enter() NpuTlScope npu_tl_scope_(1)
#define pdl_enter_early() NpuTlScope npu_tl_scope_(2)
#define NPU_TL_TOP() NpuTlScope npu_tl_scope_top_(0)
#else
#define NPU_TL_TOP() \
  do {               \
  } while (0)
#endif

// L2 eviction policies (sm_80 and later) for the `.L2::cache_hint` forms of copies and
// prefetches: every line the instruction brings in gets that priority. Made once per caller,
// not per instruction.
__device__ __forceinline__ u64 l2_evict_first() {
  u64 pol;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
__device__ __forceinline__ u64 l2_evict_last() {
  u64 pol;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// 16 bytes from global `src` to shared `dst` without passing through registers; `fill` false
// writes zeros instead (src must still be a valid address). Completes at cp_async_wait().
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool fill) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(fill ? 16u : 0u));
}
// cp_async16 with an L2 eviction policy (l2_evict_first, ...) for the lines it reads.
__device__ __forceinline__ void cp_async16_hint(void* dst, const void* src, bool fill, u64 pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(smem_addr(dst)), "l"(src),
               "r"(fill ? 16u : 0u), "l"(pol));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
// Waits until at most N of the cp.async groups this thread committed are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_n() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// Waits for every cp.async group this thread committed.
__device__ __forceinline__ void cp_async_wait() { cp_async_wait_n<0>(); }

// Before pdl_enter() a kernel may only prefetch into L2: statements calling prefetch_l2* (the
// device unit test checks this). While the previous grid runs, a kernel's blocks can already
// be resident, and fetching the weights they will stream overlaps its tail. L2 is where every
// SM's writes meet, so a line prefetched while the previous grid still writes it stays
// coherent (no value reaches the SM before the wait). `p` 16-byte aligned, `bytes` a multiple
// of 16 (a no-op below sm_90, for 0 bytes or a misaligned range).
__device__ __forceinline__ bool prefetch_l2_range(const void* p, u64 bytes) {
  return bytes > 0 && (((u64)p) & 15) == 0 && (bytes & 15) == 0;
}
// prefetch_l2 marks the lines evict-last: the streams that run meanwhile are marked
// evict-first (gv_load, the decode K/V stages), so they pass through L2 without pushing out
// what the next kernel is about to read.
__device__ __forceinline__ void prefetch_l2(const void* p, u64 bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (prefetch_l2_range(p, bytes))
    asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(p),
                 "r"((unsigned)bytes), "l"(l2_evict_last()));
#endif
}
// The same at normal priority, for the decode attention's K/V rows: marked evict-last, a
// 32,000-key cache's ~33 MB a layer crowded L2 (H100, Qwen2.5-1.5B decode at 32000 of 32768:
// 2.777 -> 2.681 ms a step at normal priority; at 1000 of 2048 unchanged, 2.080 / 2.083).
__device__ __forceinline__ void prefetch_l2_normal(const void* p, u64 bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (prefetch_l2_range(p, bytes))
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"((unsigned)bytes));
#endif
}

__device__ __forceinline__ float bf16_to_f32(unsigned short b) {
  return __uint_as_float(((unsigned int)b) << 16);
}
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float f16_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short f32_to_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

__device__ __forceinline__ bool is16_dt(int dt) { return dt == DT_F16 || dt == DT_BF16; }
// f32 as a 16-bit float (dt: DT_F16 or DT_BF16).
__device__ __forceinline__ unsigned short f32_to_h16(float f, int dt) {
  return dt == DT_BF16 ? f32_to_bf16(f) : f32_to_f16(f);
}
// A 16-bit float (dt: DT_F16 or DT_BF16) as f32.
__device__ __forceinline__ float h16_to_f32(unsigned short h, int dt) {
  return dt == DT_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

__device__ __forceinline__ float ld_dt(u64 p, int dt, i64 off) {
  switch (dt) {
    case DT_F32: return ((const float*)p)[off];
    case DT_F16: return f16_to_f32(((const unsigned short*)p)[off]);
    case DT_BF16: return bf16_to_f32(((const unsigned short*)p)[off]);
    case DT_F64: return (float)((const double*)p)[off];
    case DT_I64: return (float)((const long long*)p)[off];
    case DT_I32: return (float)((const int*)p)[off];
    case DT_I16: return (float)((const short*)p)[off];
    case DT_I8: return (float)((const signed char*)p)[off];
    default: return (float)((const unsigned char*)p)[off];
  }
}
__device__ __forceinline__ void st_dt(u64 p, int dt, i64 off, float v) {
  switch (dt) {
    case DT_F32: ((float*)p)[off] = v; break;
    case DT_F16: ((unsigned short*)p)[off] = f32_to_f16(v); break;
    case DT_BF16: ((unsigned short*)p)[off] = f32_to_bf16(v); break;
    case DT_F64: ((double*)p)[off] = (double)v; break;
    case DT_I64: ((long long*)p)[off] = (long long)v; break;
    case DT_I32: ((int*)p)[off] = (int)v; break;
    case DT_I16: ((short*)p)[off] = (short)v; break;
    case DT_I8: ((signed char*)p)[off] = (signed char)v; break;
    case DT_BOOL: ((unsigned char*)p)[off] = v != 0.0f; break;
    default: ((unsigned char*)p)[off] = (unsigned char)v; break;
  }
}
__device__ __forceinline__ i64 ldi_dt(u64 p, int dt, i64 off) {
  switch (dt) {
    case DT_I64: return ((const long long*)p)[off];
    case DT_I32: return ((const int*)p)[off];
    case DT_I16: return ((const short*)p)[off];
    case DT_I8: return ((const signed char*)p)[off];
    case DT_U8: case DT_BOOL: return ((const unsigned char*)p)[off];
    default: return (i64)ld_dt(p, dt, off);
  }
}
__device__ __forceinline__ void sti_dt(u64 p, int dt, i64 off, i64 v) {
  switch (dt) {
    case DT_I64: ((long long*)p)[off] = v; break;
    case DT_I32: ((int*)p)[off] = (int)v; break;
    case DT_I16: ((short*)p)[off] = (short)v; break;
    case DT_I8: ((signed char*)p)[off] = (signed char)v; break;
    case DT_BOOL: ((unsigned char*)p)[off] = v != 0; break;
    case DT_U8: ((unsigned char*)p)[off] = (unsigned char)v; break;
    default: st_dt(p, dt, off, (float)v); break;
  }
}
__device__ __forceinline__ bool is_float_dt(int dt) { return dt <= DT_F64; }

// Rounds v to what dtype dt can hold (f32 math, store semantics).
__device__ __forceinline__ float round_dt(int dt, float v) {
  switch (dt) {
    case DT_F16: return f16_to_f32(f32_to_f16(v));
    case DT_BF16: return bf16_to_f32(f32_to_bf16(v));
    case DT_F32: case DT_F64: return v;
    case DT_BOOL: return v != 0.0f ? 1.0f : 0.0f;
    default: return truncf(v);
  }
}

// One RoPE element, x * c + rot * s, rounded twice and added as the CPU backend computes it:
// no contraction into an FMA, so every kernel that rotates (alone or in a GEMV's epilogue)
// gives the same bits.
__device__ __forceinline__ float rope_mix(float x, float c, float rot, float s) {
  return __fadd_rn(__fmul_rn(x, c), __fmul_rn(rot, s));
}

// Kernels instanced per dtype (device.rs, DTYPE_INSTANCES; chosen by Device::func_dt): a body
// templated on DT takes the dtype of its 16-bit float operands as the constant DT where DT >= 0
// (the planner checked that every such operand has it), so each dtype switch folds to one path
// and a warp executes fewer instructions (H100: k_epilogue_rms 9.9 -> 6.4 us, docs/cuda.md);
// DT = -1 (the generic instance) reads each tensor's own dtype.
template <int DT>
__device__ __forceinline__ int dt_of(const TD& t) {
  return DT >= 0 ? DT : t.dt;
}

// a / b and a % b (a >= 0, b > 0) in 32-bit arithmetic where both fit: a 64-bit division is a
// call into a subroutine of ~70 instructions, per element in index arithmetic.
__device__ __forceinline__ i64 idiv(i64 a, i64 b) {
  return ((a | b) >> 31) == 0 ? (i64)((unsigned)a / (unsigned)b) : a / b;
}
__device__ __forceinline__ i64 imod(i64 a, i64 b) {
  return ((a | b) >> 31) == 0 ? (i64)((unsigned)a % (unsigned)b) : a % b;
}

// ld_dt, ldi_dt and st_dt out of line, for the layouts a kernel's fast path does not take: the
// dtype switches' code stays out of the kernel body, so the common path runs straight through
// (ncu put 27% of k_attn_dec_mma's stall samples in the block's prologue, mostly instruction
// fetch at branch targets past such code). Scalars, not a TD: a reference to a kernel
// parameter passed out of line would copy the descriptor to local memory.
__device__ __noinline__ float ld_dt_cold(u64 p, int dt, i64 off) { return ld_dt(p, dt, off); }
__device__ __noinline__ i64 ldi_dt_cold(u64 p, int dt, i64 off) { return ldi_dt(p, dt, off); }
__device__ __noinline__ void st_dt_cold(u64 p, int dt, i64 off, float v) { st_dt(p, dt, off, v); }
// A 16-bit float element inline, any other dtype through the cold helpers above: for the
// single loads and stores of an epilogue whose operand is f16 or bf16 in every decode step.
__device__ __forceinline__ float ld16_or_cold(u64 p, int dt, i64 off) {
  return is16_dt(dt) ? h16_to_f32(((const unsigned short*)p)[off], dt) : ld_dt_cold(p, dt, off);
}
__device__ __forceinline__ void st16_or_cold(u64 p, int dt, i64 off, float v) {
  if (dt == DT_BF16) ((unsigned short*)p)[off] = f32_to_bf16(v);
  else if (dt == DT_F16) ((unsigned short*)p)[off] = f32_to_f16(v);
  else st_dt_cold(p, dt, off, v);
}

__device__ __forceinline__ float ld(const TD& t, i64 off) { return ld_dt(t.ptr, t.dt, off); }
__device__ __forceinline__ void st(const TD& t, i64 off, float v) { st_dt(t.ptr, t.dt, off, v); }

// Offset of linear index `lin` over the first `r` dims of t. Index math runs per element in
// most kernels, and a 64-bit division costs several times a 32-bit one: indices below 2^31
// take 32-bit divisions, size-1 dims none, and the walk stops once the index is used up.
__device__ __forceinline__ i64 offset_lead(const TD& t, int r, i64 lin) {
  i64 off = 0;
  if (lin >= 0 && lin <= 0x7fffffffLL) {
    unsigned l = (unsigned)lin;
    for (int d = r - 1; d >= 0 && l != 0; --d) {
      i64 n64 = t.sh[d];
      if (n64 == 1) continue;
      if (n64 > (i64)l) {
        off += (i64)l * t.st[d];
        break;
      }
      unsigned n = (unsigned)n64;
      off += (i64)(l % n) * t.st[d];
      l /= n;
    }
    return off;
  }
  // not unrolled: each unrolled step held a call to the i64 division
  // subroutine, code every kernel jumped over before its first load
#pragma unroll 1
  for (int d = r - 1; d >= 0; --d) {
    i64 n = t.sh[d];
    off += (lin % n) * t.st[d];
    lin /= n;
  }
  return off;
}
// Element offset of row-major linear index `lin` over t's own shape.
__device__ __forceinline__ i64 offset_of(const TD& t, i64 lin) { return offset_lead(t, t.rank, lin); }

// apply_unary(code, x), the epilogue activation, is generated from the pointwise table and
// appended to this header (elementwise.rs, common_source()).

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide sum/max (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float red[32];
  __syncthreads();
  v = warp_sum(v);
  int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  if (l == 0) red[w] = v;
  __syncthreads();
  int nw = blockDim.x >> 5;
  v = (threadIdx.x < nw) ? red[threadIdx.x] : 0.0f;
  if (w == 0) v = warp_sum(v);
  if (threadIdx.x == 0) red[0] = v;
  __syncthreads();
  return red[0];
}
__device__ __forceinline__ float block_max(float v) {
  __shared__ float redm[32];
  __syncthreads();
  v = warp_max(v);
  int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  if (l == 0) redm[w] = v;
  __syncthreads();
  int nw = blockDim.x >> 5;
  v = (threadIdx.x < nw) ? redm[threadIdx.x] : -NPU_INF;
  if (w == 0) v = warp_max(v);
  if (threadIdx.x == 0) redm[0] = v;
  __syncthreads();
  return redm[0];
}

// Records the first failing step (1-based) in the run's error word.
__device__ __forceinline__ void report(int* err, int step) { atomicCAS(err, 0, step + 1); }

// Splits a flat index over an [N, C, H, W] output into (n, c, y, x): x fastest, or c fastest
// when the output is channels-last (cl), so that neighbouring threads touch neighbouring
// addresses in either layout. I is the index type (32-bit where the sizes fit).
template <typename I>
__device__ __forceinline__ void split_nchw(I e, I C, I H, I W, int cl, I& n, I& c, I& y, I& x) {
  if (cl) {
    c = e % C;
    e /= C;
    x = e % W;
    e /= W;
    y = e % H;
    n = e / H;
  } else {
    x = e % W;
    e /= W;
    y = e % H;
    e /= H;
    c = e % C;
    n = e / C;
  }
}

// Eight packed 16-bit values of dtype dt as f32.
__device__ __forceinline__ void unpack8(uint4 u, int dt, float* f) {
  unsigned int w[4] = {u.x, u.y, u.z, u.w};
  // unrolled: a runtime index would put w (and the caller's f) in local memory
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    unsigned short lo = (unsigned short)(w[i] & 0xffffu), hi = (unsigned short)(w[i] >> 16);
    f[2 * i] = h16_to_f32(lo, dt);
    f[2 * i + 1] = h16_to_f32(hi, dt);
  }
}

// Elements 8e .. 8e+7 of a 16-byte aligned f32/f16/bf16 array as f32 (one or two 16-byte
// loads), and the rounding store of eight; dt is a literal in generated code, so the branch
// folds away.
__device__ __forceinline__ void ld8(u64 p, int dt, i64 e, float* v) {
  if (dt == DT_F32) {
    const float4 a = ((const float4*)p)[2 * e], b = ((const float4*)p)[2 * e + 1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
    const uint4 u = ((const uint4*)p)[e];
    const unsigned int w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      v[2 * k] = h16_to_f32((unsigned short)(w[k] & 0xffffu), dt);
      v[2 * k + 1] = h16_to_f32((unsigned short)(w[k] >> 16), dt);
    }
  }
}
__device__ __forceinline__ void st8(u64 p, int dt, i64 e, const float* v) {
  if (dt == DT_F32) {
    ((float4*)p)[2 * e] = make_float4(v[0], v[1], v[2], v[3]);
    ((float4*)p)[2 * e + 1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    unsigned int w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const unsigned int lo = dt == DT_BF16 ? f32_to_bf16(v[2 * k]) : f32_to_f16(v[2 * k]);
      const unsigned int hi = dt == DT_BF16 ? f32_to_bf16(v[2 * k + 1]) : f32_to_f16(v[2 * k + 1]);
      w[k] = lo | (hi << 16);
    }
    ((uint4*)p)[e] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}
