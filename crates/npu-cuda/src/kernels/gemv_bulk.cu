// k_gemv_bulk: M = 1 with 16-bit a and b of one dtype, b's rows dense (row stride K), for
// products whose weight streams from DRAM. k_gemv16 keeps GV_U 16-byte loads in flight per
// lane (64 registers a thread, ~64 KB a SM), and each of a warp's columns waits a DRAM round
// trip or two: Qwen2.5-1.5B's gate/up GEMV ran at 2.2 TB/s on the H100. Here the weight
// goes through shared memory by the copy engine instead (1-D cp.async.bulk, no registers):
// block x owns rows [x * rows, (x + 1) * rows), one contiguous byte range, and streams it in
// `chunk`-byte pieces through `stages` stages (at most GB_MAX_STAGES), the first ones issued
// before the programmatic wait (nothing writes a weight), so they overlap the previous kernel.
//
// Each thread takes 16-byte pieces of a stage, 8 products against the staged a; a warp's 32
// consecutive pieces lie in one row when K % 256 == 0 (the warp sums and adds once into the
// row's shared accumulator), else every thread adds its own. After the last stage, thread i
// finishes row x * rows + i: alpha, bias or residual (beta), activation, store — k_gemv16's
// epilogue. The sums' order differs from k_gemv16's (fp32 either way).
//
// Dynamic shared memory: the barriers (GB_HEAD bytes), the stages, a (K * 2 bytes, a
// multiple of 16), the row sums (rows * 4 bytes); the planner sizes it (plan/gemm.rs).
#define GB_MAX_STAGES 16
#define GB_HEAD 128

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// Barrier `bar` expects `bytes` more and the copy engine brings them from `src` to `dst`
// (16-byte aligned, a multiple of 16 bytes), marked evict-first in L2: read once.
__device__ __forceinline__ void gb_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
      "%4;" ::"r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(l2_evict_first())
      : "memory");
#endif
}

__device__ __forceinline__ void gb_wait(unsigned long long* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{ .reg .pred p;\n"
      "W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra W; }" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
#endif
}

// The block's byte range of b and its chunk count.
struct GbRange {
  const unsigned char* src;
  u64 bytes;
  int chunks;
};

__device__ __forceinline__ GbRange gb_range(const TD& b, const TD& out, int rows, int chunk) {
  const int r = out.rank;
  const i64 N = out.sh[r - 1], K = b.sh[r - 2];
  const i64 r0 = (i64)blockIdx.x * rows, r1 = min(N, r0 + rows);
  GbRange g;
  g.src = (const unsigned char*)b.ptr + (offset_lead(b, r - 2, blockIdx.y) + r0 * K) * 2;
  g.bytes = r1 > r0 ? (u64)(r1 - r0) * K * 2 : 0;
  g.chunks = (int)((g.bytes + chunk - 1) / chunk);
  return g;
}

// Thread 0 readies the barriers and sets the first stages' copies going. Only b, a weight,
// is read, so this may come before pdl_enter() (device.rs tests the rule).
__device__ __forceinline__ void stream_weights_begin(const TD& b, const TD& out, int rows, int chunk, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char gb_smem[];
  if (threadIdx.x != 0) return;
  unsigned long long* bar = (unsigned long long*)gb_smem;
  for (int s = 0; s < stages; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar + s)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  const GbRange g = gb_range(b, out, rows, chunk);
  for (int c = 0; c < min(g.chunks, stages); ++c) {
    const u64 off = (u64)c * chunk;
    gb_copy(gb_smem + GB_HEAD + c * chunk, g.src + off, (unsigned)min((u64)chunk, g.bytes - off), bar + c);
  }
#endif
}

// The kernel's body after the wait, for b (and a) of 16-bit dtype DT: the unpacking of every
// piece compiles without a dtype branch.
template <int DT>
__device__ __forceinline__ void gemv_bulk_body(const TD& a, const TD& b, const TD& bias, int has_bias, float alpha,
                                               float beta, int act, const TD& out, const TD& nw, int has_norm,
                                               float eps, int rows, int chunk, int stages) {
  extern __shared__ __align__(128) unsigned char gb_smem[];
  unsigned long long* bar = (unsigned long long*)gb_smem;
  const int r = out.rank;
  const i64 N = out.sh[r - 1], K = a.sh[r - 1];
  const i64 batch = blockIdx.y;
  uint4* as4 = (uint4*)(gb_smem + GB_HEAD + stages * chunk);
  float* sums = (float*)(as4 + K / 8);
  for (int i = threadIdx.x; i < rows; i += blockDim.x) sums[i] = 0.0f;
  // also orders thread 0's barrier init before any thread's wait
  gv_stage_a(a, r, offset_lead(a, r - 2, batch), K, as4, nw, has_norm, eps);
  const GbRange g = gb_range(b, out, rows, chunk);
  const int nv = (int)(K / 8);  // 16-byte pieces a row
  const bool warp_rows = nv % 32 == 0;
  const int lane = threadIdx.x & 31;
  for (int c = 0; c < g.chunks; ++c) {
    const int s = c % stages;
    gb_wait(bar + s, (unsigned)(c / stages) & 1u);
    const uint4* st4 = (const uint4*)(gb_smem + GB_HEAD + s * chunk);
    const int pieces = (int)(min((u64)chunk, g.bytes - (u64)c * chunk) / 16);
    // this thread's first piece of the stage, as (row, col) within the block's range (fewer
    // than 2^31 pieces: rows * K * 2 bytes fit the shared row sums); later ones step by
    // blockDim.x without a division
    const int p = c * (chunk / 16) + (int)threadIdx.x;
    int row = p / nv, col = p - row * nv;
    float acc = 0.0f;
    int cur = -1;
    for (int i = threadIdx.x; i < pieces; i += blockDim.x) {
      float wf[8], xf[8];
      unpack8(st4[i], DT, wf);
      unpack8(as4[col], DT, xf);
      float d = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) d += wf[j] * xf[j];
      if (warp_rows) {
        // every lane of the warp is in `row` (pieces is a multiple of 32 here)
        if (row != cur) {
          if (cur >= 0) {
            acc = warp_sum(acc);
            if (lane == 0) atomicAdd(sums + cur, acc);
          }
          acc = 0.0f;
          cur = row;
        }
        acc += d;
      } else {
        atomicAdd(sums + row, d);
      }
      col += blockDim.x;
      while (col >= nv) {
        col -= nv;
        ++row;
      }
    }
    if (warp_rows && cur >= 0) {
      acc = warp_sum(acc);
      if (lane == 0) atomicAdd(sums + cur, acc);
    }
    __syncthreads();  // the stage is consumed before it is refilled
    if (threadIdx.x == 0 && c + stages < g.chunks) {
      const u64 off = (u64)(c + stages) * chunk;
      gb_copy(gb_smem + GB_HEAD + s * chunk, g.src + off, (unsigned)min((u64)chunk, g.bytes - off), bar + s);
    }
  }
  __syncthreads();
  const i64 r0 = (i64)blockIdx.x * rows;
  for (int i = threadIdx.x; i < rows && r0 + i < N; i += blockDim.x) {
    const i64 n = r0 + i;
    float v = alpha * sums[i];
    if (has_bias) v = add_bias(has_bias, v, beta, ld(bias, offset_lead(bias, r - 2, batch) + n * bias.st[r - 1]), out.dt);
    if (act >= 0) v = apply_unary(act, v);
    st(out, offset_lead(out, r - 2, batch) + n * out.st[r - 1], v);
  }
}

extern "C" __global__ void __launch_bounds__(256) k_gemv_bulk(TD a, TD b, TD bias, int has_bias, float alpha,
                                                              float beta, int act, TD out, TD nw, int has_norm,
                                                              float eps, int rows, int chunk, int stages) {
  stream_weights_begin(b, out, rows, chunk, stages);
  pdl_enter();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (b.dt == DT_BF16)
    gemv_bulk_body<DT_BF16>(a, b, bias, has_bias, alpha, beta, act, out, nw, has_norm, eps, rows, chunk, stages);
  else
    gemv_bulk_body<DT_F16>(a, b, bias, has_bias, alpha, beta, act, out, nw, has_norm, eps, rows, chunk, stages);
#endif
}
