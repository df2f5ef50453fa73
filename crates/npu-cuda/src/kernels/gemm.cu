// GEMM fallbacks and helpers: a tiled SIMT GEMM over arbitrary strides (any dtypes, f32
// accumulation, fused alpha/bias/activation), the bandwidth-bound GEMV for M = 1, the
// epilogues applied after cuBLASLt, and im2col for convolutions.
// Operand descriptors are normalized on the host to the output's rank (broadcast dims have
// stride 0), so batch offsets come from the leading dims of each descriptor.

#define GT 64
#define GK 16

// `has_bias` of the GEMM kernels: 0 none, 1 a bias (added before the one rounding), 2 a
// residual (added to the product rounded to the output dtype, as PyTorch's `r + linear(x)`).
__device__ __forceinline__ float add_bias(int mode, float v, float beta, float bv, int out_dt) {
  if (mode == 2) v = round_dt(out_dt, v);
  return v + beta * bv;
}

extern "C" __global__ void __launch_bounds__(256) k_gemm(TD a, TD b, TD bias, int has_bias, float alpha,
                                                         float beta, int act, TD out) {
  pdl_enter();
  int r = out.rank;
  i64 M = out.sh[r - 2], N = out.sh[r - 1], K = a.sh[r - 1];
  i64 batch = blockIdx.z;
  i64 ao = offset_lead(a, r - 2, batch), bo = offset_lead(b, r - 2, batch);
  i64 oo = offset_lead(out, r - 2, batch);
  i64 a_sm = a.st[r - 2], a_sk = a.st[r - 1], b_sk = b.st[r - 2], b_sn = b.st[r - 1];
  __shared__ float As[GK][GT + 1];
  __shared__ float Bs[GK][GT + 1];
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  i64 m0 = blockIdx.y * (i64)GT, n0 = blockIdx.x * (i64)GT;
  float acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (i64 k0 = 0; k0 < K; k0 += GK) {
    for (int idx = threadIdx.x; idx < GK * GT; idx += 256) {
      int kk = idx / GT, mm = idx % GT;
      i64 gm = m0 + mm, gk = k0 + kk;
      As[kk][mm] = (gm < M && gk < K) ? ld(a, ao + gm * a_sm + gk * a_sk) : 0.0f;
      i64 gn = n0 + mm;
      Bs[kk][mm] = (gn < N && gk < K) ? ld(b, bo + gk * b_sk + gn * b_sn) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < GK; ++kk) {
      float av[4], bv[4];
      for (int i = 0; i < 4; ++i) av[i] = As[kk][ty + 16 * i];
      for (int j = 0; j < 4; ++j) bv[j] = Bs[kk][tx + 16 * j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
  i64 bio = has_bias ? offset_lead(bias, r - 2, batch) : 0;
  for (int i = 0; i < 4; ++i) {
    i64 gm = m0 + ty + 16 * i;
    if (gm >= M) continue;
    for (int j = 0; j < 4; ++j) {
      i64 gn = n0 + tx + 16 * j;
      if (gn >= N) continue;
      float v = alpha * acc[i][j];
      if (has_bias) v = add_bias(has_bias, v, beta, ld(bias, bio + gm * bias.st[r - 2] + gn * bias.st[r - 1]), out.dt);
      if (act >= 0) v = apply_unary(act, v);
      st(out, oo + gm * out.st[r - 2] + gn * out.st[r - 1], v);
    }
  }
}

// out[.., m, n] = act(c[batch * cbs + m * N + n] + beta * bias) for a dense f32 result c.
extern "C" __global__ void k_epilogue(const float* c, i64 cbs, TD bias, int has_bias, float beta, int act,
                                      TD out, i64 total) {
  pdl_enter();
  int r = out.rank;
  i64 M = out.sh[r - 2], N = out.sh[r - 1];
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    i64 n = e % N, m = (e / N) % M, batch = e / (N * M);
    float v = c[batch * cbs + m * N + n];
    if (has_bias) v = add_bias(has_bias, v, beta, ld(bias, offset_lead(bias, r - 2, batch) + m * bias.st[r - 2] + n * bias.st[r - 1]), out.dt);
    if (act >= 0) v = apply_unary(act, v);
    st(out, offset_lead(out, r - 2, batch) + m * out.st[r - 2] + n * out.st[r - 1], v);
  }
}

// k_epilogue (no activation) over a dense f32 result c of rows of N, and then k_rms_norm of
// the rows it stored, in one launch: one block per row. A decoder's residual GEMM followed by
// the next GEMM's RMSNorm prologue (plan/epilogue_norm.rs pairs them). Both outputs equal the
// two kernels' bit for bit: the stored (rounded) values are what the norm reads, each thread
// holds the same chunks as k_rms_norm's 16-byte path and the sum goes through the same
// block_sum. Needs what that path needs of out, w and normed (16-bit, rows contiguous and
// 16-byte aligned, N % 8 == 0, N / 8 <= RN8 * blockDim.x) and a bias of out's dtype whose
// rows are contiguous and 16-byte aligned (any row stride: 0 broadcasts one row); the planner
// checks. Only the chunks a thread owns are loaded, all before any is used: loads behind the
// dtype switches of the arithmetic waited for it (ncu: 14.8 us a 1536-wide row of a prefill,
// where the two kernels took 7.4 + 6.2).
// DT as in dt_of: bias, out, w and normed of dtype DT where DT >= 0.
template <int DT>
__device__ __forceinline__ void epilogue_rms_body(const float* c, const TD& bias, int mode, float beta,
                                                  const TD& out, const TD& w, float eps, const TD& normed) {
  const int r = out.rank, nt = blockDim.x, t = threadIdx.x;
  const i64 N = out.sh[r - 1], row = blockIdx.x;
  const int c8 = (int)(N / 8);
  const int od = dt_of<DT>(out), nd = dt_of<DT>(normed);
  const float4* cp = (const float4*)(c + row * N);
  const uint4* bp = (const uint4*)((const unsigned short*)bias.ptr + offset_lead(bias, r - 1, row));
  const uint4* wp = (const uint4*)w.ptr;
  const u64 op = out.ptr + 2 * (u64)offset_lead(out, r - 1, row);
  const u64 np = normed.ptr + 2 * (u64)offset_lead(normed, r - 1, row);
  float4 cr[RN8][2];
  uint4 br[RN8], wr[RN8];
#pragma unroll
  for (int j = 0; j < RN8; ++j) {
    const int ch = t + j * nt;
    if (ch < c8) {
      cr[j][0] = cp[2 * ch];
      cr[j][1] = cp[2 * ch + 1];
      br[j] = bp[ch];
      wr[j] = wp[ch];
    }
  }
  float v[RN8][8];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < RN8; ++j) {
    const int ch = t + j * nt;
    if (ch < c8) {
      const float cv[8] = {cr[j][0].x, cr[j][0].y, cr[j][0].z, cr[j][0].w,
                           cr[j][1].x, cr[j][1].y, cr[j][1].z, cr[j][1].w};
      float bv[8];
      unpack8(br[j], dt_of<DT>(bias), bv);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[j][i] = round_dt(od, add_bias(mode, cv[i], beta, bv[i], od));
      st8(op, od, ch, v[j]);
#pragma unroll
      for (int i = 0; i < 8; ++i) ss += v[j][i] * v[j][i];
    }
  }
  ss = block_sum(ss);
  const float inv = 1.0f / sqrtf(ss / (float)N + eps);
#pragma unroll
  for (int j = 0; j < RN8; ++j) {
    const int ch = t + j * nt;
    if (ch < c8) {
      float wv[8], y[8];
      unpack8(wr[j], dt_of<DT>(w), wv);
#pragma unroll
      for (int i = 0; i < 8; ++i) y[i] = round_dt(nd, v[j][i] * inv) * wv[i];
      st8(np, nd, ch, y);
    }
  }
}
#define EPILOGUE_RMS_PARAMS const float *c, TD bias, int mode, float beta, TD out, TD w, float eps, TD normed
extern "C" __global__ void k_epilogue_rms(EPILOGUE_RMS_PARAMS) {
  pdl_enter();
  epilogue_rms_body<-1>(c, bias, mode, beta, out, w, eps, normed);
}
extern "C" __global__ void k_epilogue_rms_bf16(EPILOGUE_RMS_PARAMS) {
  pdl_enter();
  epilogue_rms_body<DT_BF16>(c, bias, mode, beta, out, w, eps, normed);
}
extern "C" __global__ void k_epilogue_rms_f16(EPILOGUE_RMS_PARAMS) {
  pdl_enter();
  epilogue_rms_body<DT_F16>(c, bias, mode, beta, out, w, eps, normed);
}

// Conv epilogue: out[n, o, y, x] = act(c[o * ldc + n * pix + y * OW + x] + bias[o]).
extern "C" __global__ void k_conv_epilogue(const float* c, i64 ldc, i64 o0, TD bias, int has_bias, int act,
                                           TD out, i64 og) {
  pdl_enter();
  i64 N = out.sh[0], OH = out.sh[2], OW = out.sh[3];
  i64 pix = OH * OW, total = og * N * pix;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    i64 p = e % pix, n = (e / pix) % N, o = e / (pix * N);
    float v = c[o * ldc + n * pix + p];
    if (has_bias) v += ld(bias, (o0 + o) * bias.st[bias.rank - 1]);
    if (act >= 0) v = apply_unary(act, v);
    st(out, n * out.st[0] + (o0 + o) * out.st[1] + (p / OW) * out.st[2] + (p % OW) * out.st[3], v);
  }
}

// col[(ci * kh + i) * kw + j, n * pix + y * OW + x] = x[n, c0 + ci, y*sh - ph + i*dh, x*sw - pw + j*dw].
extern "C" __global__ void k_im2col(TD x, int c0, int cg, int kh, int kw, int sh, int sw, int ph, int pw,
                                    int dh, int dw, int OH, int OW, u64 col, int col_dt) {
  pdl_enter();
  i64 N = x.sh[0], H = x.sh[2], W = x.sh[3];
  i64 pix = (i64)OH * OW, cols = N * pix, total = (i64)cg * kh * kw * cols;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    i64 cidx = e % cols, row = e / cols;
    i64 n = cidx / pix, p = cidx % pix;
    int j = row % kw, i = (row / kw) % kh, ci = row / (kw * kh);
    i64 yy = (p / OW) * sh - ph + i * dh, xx = (p % OW) * sw - pw + j * dw;
    float v = 0.0f;
    if (yy >= 0 && yy < H && xx >= 0 && xx < W) v = ld(x, n * x.st[0] + (c0 + ci) * x.st[1] + yy * x.st[2] + xx * x.st[3]);
    st_dt(col, col_dt, e, v);
  }
}

// M = 1: out[.., 0, n] = act(alpha * a[.., 0, :] . b[.., :, n] + beta * bias). One warp per
// output column n, b contiguous along K. vec = 1: 16-bit b with 16-byte loads (K % 8 == 0,
// rows 16-byte aligned). a is staged in shared memory as f32 (dynamic, K floats).
extern "C" __global__ void __launch_bounds__(256) k_gemv(TD a, TD b, TD bias, int has_bias, float alpha, float beta,
                                                         int act, TD out, int vec) {
  pdl_enter();
  extern __shared__ float as[];
  int r = out.rank;
  i64 N = out.sh[r - 1], K = a.sh[r - 1];
  i64 batch = blockIdx.y;
  i64 ao = offset_lead(a, r - 2, batch), bo = offset_lead(b, r - 2, batch);
  for (i64 k = threadIdx.x; k < K; k += blockDim.x) as[k] = ld(a, ao + k * a.st[r - 1]);
  __syncthreads();
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  i64 n = (i64)blockIdx.x * (blockDim.x >> 5) + warp;
  if (n >= N) return;
  i64 rowo = bo + n * b.st[r - 1];
  float s = 0.0f;
  if (vec) {
    const uint4* row = (const uint4*)((const unsigned short*)b.ptr + rowo);
    i64 nv = K / 8;
#pragma unroll 4
    for (i64 v = lane; v < nv; v += 32) {
      uint4 u = __ldg(row + v);
      float f[8];
      unpack8(u, b.dt, f);
      const float* ap = as + v * 8;
#pragma unroll
      for (int i = 0; i < 8; ++i) s += f[i] * ap[i];
    }
  } else {
    i64 bk = b.st[r - 2];
    for (i64 k = lane; k < K; k += 32) s += ld(b, rowo + k * bk) * as[k];
  }
  s = warp_sum(s);
  if (lane == 0) {
    float v = alpha * s;
    if (has_bias) v = add_bias(has_bias, v, beta, ld(bias, offset_lead(bias, r - 2, batch) + n * bias.st[r - 1]), out.dt);
    if (act >= 0) v = apply_unary(act, v);
    st(out, offset_lead(out, r - 2, batch) + n * out.st[r - 1], v);
  }
}

// M = 1 with 16-bit a and b of one dtype: a is staged raw in shared memory (K/8 uint4, read
// conflict-free, copied by cp.async all in flight), b rows stream through 16-byte loads, GV_U
// in flight per lane. One warp per output column; a block takes groups of as many columns
// as it has warps (8, or 12 where that spreads long rows evenly over the SMs), gridDim.x
// apart (the planner launches at most a few blocks per SM, so a wide matrix pays the staging
// once per block, not once per group). At most 64 registers (`__maxnreg__`): four blocks of
// 8 warps an SM. A column's first loads are issued before
// the previous column's reduction and store, and the first column's before a is staged (b is
// a weight: no kernel writes it). Needs K % 8 == 0 and 16-byte aligned b rows. `has_norm`:
// the staged row is RMS-normalized first, as k_rms_norm computes it (every block normalizes
// its own copy; the norm weight is staged beside a where its layout allows, so no global read
// follows the staging's).
#define GV_U 4
// b is read once per call: its lines are loaded evict-first (ld.global.cs), so streaming a
// matrix larger than L2 does not evict the activations and the next kernel's L2 prefetch
// (H100, Qwen2.5-1.5B decode at 1000 of 2048: 2.207 -> 2.074 ms a step).
__device__ __forceinline__ void gv_load(uint4 (&w)[GV_U], const uint4* row, int v0, int nv) {
#pragma unroll
  for (int u = 0; u < GV_U; ++u)
    if (v0 + 32 * u < nv) w[u] = __ldcs(row + v0 + 32 * u);
}

// The output column warp `warp` of column group g computes. hh = 0: column g * W + warp, a
// group being a block's W warps (8 or 12, plan/gemm.rs). hh > 0 (k_gemv16_rope, 8 warps,
// rows of d = 2 * hh columns): the group's four rotation pairs of one row, warp w < 4 the
// column i of pair g * 4 + w and warp w + 4 its partner i + hh.
__device__ __forceinline__ i64 gv_col(i64 g, int warp, unsigned hh) {
  if (hh == 0) return g * (blockDim.x >> 5) + warp;
  const unsigned pair = (unsigned)g * 4 + (warp & 3), row = pair / hh;
  return (i64)row * 2 * hh + (pair - row * hh) + (warp >> 2) * hh;
}

// Weight row n of k_gemv16's b in batch blockIdx.y (r: out's rank). Address arithmetic on
// the kernel's parameters only: no global memory is read, so it may run before the
// programmatic wait.
__device__ __forceinline__ const unsigned short* gv_row_ptr(const TD& b, int r, i64 n) {
  return (const unsigned short*)b.ptr + offset_lead(b, r - 2, blockIdx.y) + n * b.st[r - 1];
}

// k_gemv16's prefetch: warp w's lane 0 fetches the first GV_PREFETCH_ROW bytes of its first
// column's weight row into L2 (a whole row at K <= 2048), so the block's first loads after the
// wait hit L2.
#define GV_PREFETCH_ROW 4096
__device__ __forceinline__ void prefetch_l2_gemv_row(const TD& a, const TD& b, const TD& out, unsigned hh = 0) {
  int r = out.rank;
  i64 N = out.sh[r - 1], K = a.sh[r - 1];
  i64 n = gv_col(blockIdx.x, threadIdx.x >> 5, hh);
  if ((threadIdx.x & 31) != 0 || n >= N) return;
  prefetch_l2(gv_row_ptr(b, r, n), min((u64)K * 2, (u64)GV_PREFETCH_ROW));
}

// k_gemv16p (k_gemv16 with its weights' first bytes before the programmatic wait): warp w
// copies the first `wpre` bytes of its first column's weight row into its slice of shared
// memory (past a's staging and the norm weight's, `gv_wpre_at`) by cp.async, one group that
// the body's staging wait also waits for, so the copies stream while the previous grid
// drains, where a block's first weight bytes otherwise wait for the release. The planner
// launches it only where it proved the weight read-only (`Planner::read_only`: a weight or
// constant no step writes), so nothing is read that a grid may still write. Lane 0 then
// fetches the next GV_PREFETCH_ROW bytes of the row into L2. wpre: a multiple of 512 (a
// 16-byte unit a lane), at most the row's bytes.
__device__ __forceinline__ uint4* gv_wpre_at(uint4* as4, int nv, int has_norm, int npre, int warp) {
  return as4 + nv * (1 + (has_norm == 1)) + warp * npre;
}
__device__ __forceinline__ void preload_gemv_row(const TD& a, const TD& b, const TD& out, int has_norm, int wpre,
                                                 unsigned hh = 0) {
  int r = out.rank;
  i64 N = out.sh[r - 1], K = a.sh[r - 1];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  i64 n = gv_col(blockIdx.x, warp, hh);
  // a warp past N streams row N - 1, as the body does
  const unsigned short* row = gv_row_ptr(b, r, min(n, N - 1));
  extern __shared__ uint4 as4[];
  const int npre = wpre >> 4;
  uint4* dst = gv_wpre_at(as4, (int)(K / 8), has_norm, npre, warp);
  const u64 pol = l2_evict_first();
  for (int v = lane; v < npre; v += 32) cp_async16_hint(dst + v, (const uint4*)row + v, true, pol);
  cp_async_commit();
  if (lane != 0 || n >= N || K * 2 <= wpre) return;
  prefetch_l2(row + wpre / 2, min((u64)K * 2 - wpre, (u64)GV_PREFETCH_ROW));
}

// Issues the copies of n 16-byte units from `src` to shared `dst` by cp.async (every unit in
// flight, no registers held); the caller commits, waits and syncs once for all it staged. A
// loop of loads and stores waited on each unit: five round trips a thread for a K = 8960 row.
__device__ __forceinline__ void stage_vec16(uint4* dst, const uint4* src, int n) {
  for (int v = threadIdx.x; v < n; v += blockDim.x) cp_async16(dst + v, src + v, true);
}

// k_gemv16_rope's epilogue operands (plan/gemv_rope.rs states when the kernel equals the
// GEMV and then the decode step's RoPE / KV-cache group): the GEMV's output row holds rows0
// query rows, rows1 key rows and then the value rows, each of d = 2 * hh elements; the tables,
// the rotations' outputs and the caches are 16-bit rows a stride apart (k_rope_cache_dec's
// flattening; a table stride 0 broadcasts one row), a cache row written at position t of the
// one-element index `pos`.
struct GvRope {
  const unsigned short *c0, *s0, *c1, *s1;
  unsigned short *o0, *o1, *kc, *vc;
  i64 cs0, ss0, os0, cs1, ss1, os1, kcs, kcp, vcs, vcp, T;
  const void* pos;
  int pos64, rows0, rows1, step_k, step_v;
  unsigned hh;
  int* err;
};

// What rotation pair `col`'s epilogue reads besides the GEMV's values: its table entries
// (for a query or key row) and the cache position. Loaded with the block's first weight round
// (after the programmatic wait), so their latency is off the block's tail.
struct GvRopeIn {
  float cl, ch, sl, sh;
  i64 t;
};
__device__ __forceinline__ GvRopeIn gv_rope_load(const GvRope& p, unsigned col, int dt) {
  const unsigned d = 2 * p.hh, row = col / d, i = col - row * d;
  GvRopeIn e{0.0f, 0.0f, 0.0f, 0.0f, ld_index0(p.pos, p.pos64)};
  if (row < (unsigned)(p.rows0 + p.rows1)) {
    const bool q = row < (unsigned)p.rows0;
    const unsigned r = q ? row : row - p.rows0;
    const unsigned short* c = q ? p.c0 + r * p.cs0 : p.c1 + r * p.cs1;
    const unsigned short* s = q ? p.s0 + r * p.ss0 : p.s1 + r * p.ss1;
    e.cl = h16_to_f32(c[i], dt);
    e.ch = h16_to_f32(c[i + p.hh], dt);
    e.sl = h16_to_f32(s[i], dt);
    e.sh = h16_to_f32(s[i + p.hh], dt);
  }
  return e;
}

// Rotation pair `col` (a first-half column) of the GEMV's output values lo, hi (rounded to
// dt, as stored), with its inputs e: a query or key row's pair rotated into its output (a
// key's also into its cache row), a value row's pair copied to its cache row. A position
// outside the cache reports the index_copy step that would have refused it.
__device__ __forceinline__ void gv_rope_pair(const GvRope& p, const GvRopeIn& e, unsigned col, float lo, float hi,
                                             int dt) {
  const unsigned d = 2 * p.hh, row = col / d, i = col - row * d;
  const bool q = row < (unsigned)p.rows0, k = !q && row < (unsigned)(p.rows0 + p.rows1);
  if (q || k) {
    const unsigned r = q ? row : row - p.rows0;
    unsigned short* o = q ? p.o0 + r * p.os0 : p.o1 + r * p.os1;
    const float rl = round_dt(dt, rope_mix(lo, e.cl, -hi, e.sl));
    hi = round_dt(dt, rope_mix(hi, e.ch, lo, e.sh));
    lo = rl;
    o[i] = f32_to_h16(lo, dt);
    o[i + p.hh] = f32_to_h16(hi, dt);
    if (q) return;
  }
  if (e.t < 0 || e.t >= p.T) {
    report(p.err, k ? p.step_k : p.step_v);
    return;
  }
  unsigned short* dst = k ? p.kc + (row - p.rows0) * p.kcs + e.t * p.kcp
                          : p.vc + (row - p.rows0 - p.rows1) * p.vcs + e.t * p.vcp;
  dst[i] = f32_to_h16(lo, dt);
  dst[i + p.hh] = f32_to_h16(hi, dt);
}

// The deferred norm's step over the staged row's 16-byte unit v: h * h added to ss (returned),
// the unit replaced by h * w (w: the norm weight's eight elements, rounded to dt once).
__device__ __forceinline__ float gv_scale8(uint4* as4, int v, uint4 w, int dt, float ss) {
  float xf[8], wf[8];
  unpack8(as4[v], dt, xf);
  unpack8(w, dt, wf);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    ss += xf[i] * xf[i];
    xf[i] *= wf[i];
  }
  st8((u64)as4, dt, v, xf);
  return ss;
}

// k_gemv16's body, instanced per dtype (DT as in dt_of: a and b of dtype DT where DT >= 0).
// With the dtype a constant, unpacking eight bf16 is eight shifts and masks instead of a
// select between two conversions per element: the generic body issued ~117 instructions per
// 512 bytes a warp streams in the gate/up GEMV (ncu, H100), its issue slots 46% busy.
// Measured, not kept: also reading the operands' rank-dependent fields through unrolled
// selects instead of a run-time index into the parameters (which copies them to local memory
// first) spread the code before the first weight load over ~40 KB and was slower (docs/cuda.md).
// ROPE: k_gemv16_rope (one batch, N a whole number of rows, no activation; the planner
// checks), columns as gv_col maps them for rp.hh and the RoPE / cache epilogue.
template <int DT, bool ROPE, bool PRE>
__device__ __forceinline__ void gemv16_body(const TD& a, const TD& b, const TD& bias, int has_bias, float alpha,
                                            float beta, int act, const TD& out, const TD& nw, int has_norm,
                                            float eps, int wpre, const GvRope& rp) {
  const int dt = dt_of<DT>(b);
  extern __shared__ uint4 as4[];
  unsigned short* as16 = (unsigned short*)as4;
  int r = out.rank;
  i64 N = out.sh[r - 1], K = a.sh[r - 1];
  i64 batch = blockIdx.y;
  i64 ao = offset_lead(a, r - 2, batch), bo = offset_lead(b, r - 2, batch);
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // column groups of gw columns: group g exists while g * gw < N (no division)
  const int gw = blockDim.x >> 5;
  const unsigned short* bp = (const unsigned short*)b.ptr + bo;
  i64 bs = b.st[r - 1];
  // a warp past N streams row N - 1 (in bounds) and stores nothing
  const unsigned hh = ROPE ? rp.hh : 0;
  auto row_of = [&](i64 g) { return (const uint4*)(bp + min(gv_col(g, warp, hh), N - 1) * bs); };
  int nv = (int)(K / 8);
  i64 g = blockIdx.x;
  const uint4* row = row_of(g);
  // PRE: the first group's first wpre / 16 units wait in shared memory (preload_gemv_row)
  uint4 w[GV_U];
  gv_load(w, row, lane + (PRE ? wpre >> 4 : 0), nv);
  // k_gemv16_rope: the first group's epilogue inputs (GvRopeIn) and bias, in flight with it
  GvRopeIn ep{};
  float bv = 0.0f;
  auto ep_load = [&](i64 g) {
    if (threadIdx.x < 4) ep = gv_rope_load(rp, (unsigned)gv_col(g, threadIdx.x, hh), dt);
    if (has_bias && lane == 0) bv = ld16_or_cold(bias.ptr, bias.dt, gv_col(g, warp, hh) * bias.st[r - 1]);
  };
  if (ROPE) ep_load(g);
  const unsigned short* ap = (const unsigned short*)a.ptr;
  i64 ak = a.st[r - 1];
  // has_norm 2 (the planner: bf16 a and norm weight, contiguous, K at most eight elements a
  // thread; plan/gemm.rs): the norm weight's eight elements a thread read into registers beside
  // the staging, so that the block asks K * 2 bytes less shared memory (fewer bytes a block let
  // more of the next grid's blocks land beside it: exp-defer). Else (has_norm 1) the norm
  // weight, where it is a contiguous, 16-byte aligned row of a's dtype, is staged right after
  // a (the planner gives the GEMV 4 K bytes), in the same batch of loads.
  const bool nw_reg = has_norm == 2;
  const bool nw_vec = has_norm == 1 && nw.dt == dt && nw.st[nw.rank - 1] == 1 && (nw.ptr & 15) == 0;
  if (ak == 1 && ((a.ptr + (u64)ao * 2) & 15) == 0) {
    // contiguous, 16-byte aligned a (K % 8 == 0 here)
    stage_vec16(as4, (const uint4*)(ap + ao), nv);
  } else {
#pragma unroll 4
    for (int k = threadIdx.x; k < (int)K; k += blockDim.x) as16[k] = ap[ao + k * ak];
  }
  if (nw_vec) stage_vec16(as4 + nv, (const uint4*)nw.ptr, nv);
  uint4 wv = make_uint4(0, 0, 0, 0);
  if (nw_reg && (int)threadIdx.x < nv) {
    const unsigned short* np = (const unsigned short*)nw.ptr + threadIdx.x * 8;
    if ((nw.ptr & 15) == 0) {
      wv = *(const uint4*)np;
    } else {
      unsigned e[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) e[i] = np[2 * i] | ((unsigned)np[2 * i + 1] << 16);
      wv = make_uint4(e[0], e[1], e[2], e[3]);
    }
  }
  cp_async_commit();
  cp_async_wait();
  __syncthreads();
  // The RMSNorm prologue. bf16: deferred, x = h * w staged and each column's sum scaled by the
  // norm's 1 / rms after its loop, so the first FMA waits for one elementwise pass and one
  // barrier instead of the sum of squares' block reduction, the square root and a second pass
  // (1.5 us a launch in the decode graph, exp-nonorm). Each warp's partial sum of squares is
  // left in shared memory and summed by every warp where its first group needs the scale.
  // Static shared memory kept to a few words: 1.5 KB more a block (a partial a thread) kept
  // the decode attention's blocks from landing beside the GEMV's (+0.12 ms a step). The sums differ
  // from the two kernels' (one rounding of h * w where they round h / rms and then its product
  // with w). f16 keeps the exact form: h * w unnormalized can pass its range.
  __shared__ float gv_ss[12];
  const bool defer = nw_reg || (NPU_GEMV_NORM_DEFER && has_norm && dt == DT_BF16);
  if (defer) {
    float ss = 0.0f;
    if (nw_reg) {
      if ((int)threadIdx.x < nv) ss = gv_scale8(as4, threadIdx.x, wv, dt, ss);
    } else if (nw_vec) {
      for (int v = threadIdx.x; v < nv; v += blockDim.x) ss = gv_scale8(as4, v, as4[nv + v], dt, ss);
    } else {
      i64 ws = nw.st[nw.rank - 1];
      for (int k = threadIdx.x; k < (int)K; k += blockDim.x) {
        float v = h16_to_f32(as16[k], dt);
        ss += v * v;
        as16[k] = f32_to_bf16(v * ld_dt_cold(nw.ptr, nw.dt, k * ws));
      }
    }
    ss = warp_sum(ss);
    if (lane == 0) gv_ss[warp] = ss;
    __syncthreads();
  } else if (has_norm) {
    bool bf = dt == DT_BF16;
    float ss = 0.0f;
    for (int k = threadIdx.x; k < (int)K; k += blockDim.x) {
      float v = h16_to_f32(as16[k], dt);
      ss += v * v;
    }
    ss = block_sum(ss);
    const float inv0 = 1.0f / sqrtf(ss / (float)K + eps);
    if (nw_vec) {
      // elementwise, 8 a thread: no global load on the block's critical path
      for (int v = threadIdx.x; v < nv; v += blockDim.x) {
        float xf[8], wf[8];
        unpack8(as4[v], dt, xf);
        unpack8(as4[nv + v], dt, wf);
#pragma unroll
        for (int i = 0; i < 8; ++i) xf[i] = round_dt(dt, xf[i] * inv0) * wf[i];
        st8((u64)as4, dt, v, xf);
      }
    } else {
      i64 ws = nw.st[nw.rank - 1];
      for (int k = threadIdx.x; k < (int)K; k += blockDim.x) {
        float v = h16_to_f32(as16[k], dt);
        float y = round_dt(dt, v * inv0) * ld_dt_cold(nw.ptr, nw.dt, k * ws);
        as16[k] = bf ? f32_to_bf16(y) : f32_to_f16(y);
      }
    }
    __syncthreads();
  }
  for (; g * gw < N; g += gridDim.x) {
    i64 n = gv_col(g, warp, hh);
    float s = 0.0f;
    int v0 = lane;
    if (PRE && g == blockIdx.x) {
      // read from the kernel's parameters here, not held in registers across the staging
      const int npre = wpre >> 4;
      const uint4* wsm = gv_wpre_at(as4, nv, has_norm, npre, warp);
      for (; v0 < npre; v0 += 32) {
        float wf[8], xf[8];
        unpack8(wsm[v0], dt, wf);
        unpack8(as4[v0], dt, xf);
#pragma unroll
        for (int i = 0; i < 8; ++i) s += wf[i] * xf[i];
      }
    }
    // the preloaded units come first in the streamed order (a lane's every 32nd unit), so the
    // sums are k_gemv16's bit for bit
    if (!PRE || v0 < nv) for (;;) {
#pragma unroll
      for (int u = 0; u < GV_U; ++u) {
        int v = v0 + 32 * u;
        if (v < nv) {
          float wf[8], xf[8];
          unpack8(w[u], dt, wf);
          unpack8(as4[v], dt, xf);
#pragma unroll
          for (int i = 0; i < 8; ++i) s += wf[i] * xf[i];
        }
      }
      v0 += 32 * GV_U;
      if (v0 >= nv) break;
      gv_load(w, row, v0, nv);
    }
    if ((g + gridDim.x) * gw < N) {
      row = row_of(g + gridDim.x);
      gv_load(w, row, lane, nv);
    }
    s = warp_sum(s);
    if (defer) {
      // the scale lives in shared memory between groups: a register held across the loop
      // spilled (64 registers)
      __shared__ float gv_inv[12];
      if (g == blockIdx.x) {
        const float t = warp_sum(lane < gw ? gv_ss[lane] : 0.0f);
        gv_inv[warp] = 1.0f / sqrtf(t / (float)K + eps);
      }
      s *= gv_inv[warp];
    }
    if (ROPE) {
      __shared__ float gv_x[8];
      if (lane == 0) {
        float v = alpha * s;
        if (has_bias) v = add_bias(has_bias, v, beta, bv, dt);
        v = round_dt(dt, v);
        ((unsigned short*)out.ptr)[n * out.st[r - 1]] = f32_to_h16(v, dt);
        gv_x[warp] = v;
      }
      __syncthreads();
      if (threadIdx.x < 4)
        gv_rope_pair(rp, ep, (unsigned)gv_col(g, threadIdx.x, hh), gv_x[threadIdx.x], gv_x[threadIdx.x + 4], dt);
      if ((g + gridDim.x) * gw < N) ep_load(g + gridDim.x);
      __syncthreads();
    } else if (lane == 0 && n < N) {
      float v = alpha * s;
      // the 16-bit bias and output read and written directly, other dtypes and the
      // activation out of line (a decode GEMV has none)
      if (has_bias) {
        const i64 bo2 = offset_lead(bias, r - 2, batch) + n * bias.st[r - 1];
        v = add_bias(has_bias, v, beta, ld16_or_cold(bias.ptr, bias.dt, bo2), out.dt);
      }
      if (act >= 0) v = apply_unary_cold(act, v);
      st16_or_cold(out.ptr, out.dt, offset_lead(out, r - 2, batch) + n * out.st[r - 1], v);
    }
  }
}

#undef NPU_KBIT
#define NPU_KBIT 1
#define GEMV16_PARAMS                                                                                  \
  TD a, TD b, TD bias, int has_bias, float alpha, float beta, int act, TD out, TD nw, int has_norm, \
      float eps
#define GEMV16_ARGS a, b, bias, has_bias, alpha, beta, act, out, nw, has_norm, eps
extern "C" __global__ void __maxnreg__(64) k_gemv16(GEMV16_PARAMS) {
  prefetch_l2_gemv_row(a, b, out);
  pdl_enter();
  gemv16_body<-1, false, false>(GEMV16_ARGS, 0, GvRope{});
}
extern "C" __global__ void __maxnreg__(64) k_gemv16_bf16(GEMV16_PARAMS) {
  prefetch_l2_gemv_row(a, b, out);
  pdl_enter();
  gemv16_body<DT_BF16, false, false>(GEMV16_ARGS, 0, GvRope{});
}
extern "C" __global__ void __maxnreg__(64) k_gemv16_f16(GEMV16_PARAMS) {
  prefetch_l2_gemv_row(a, b, out);
  pdl_enter();
  gemv16_body<DT_F16, false, false>(GEMV16_ARGS, 0, GvRope{});
}
extern "C" __global__ void __maxnreg__(64) k_gemv16p(GEMV16_PARAMS, int wpre) {
  preload_gemv_row(a, b, out, has_norm, wpre);
  pdl_enter();
  gemv16_body<-1, false, true>(GEMV16_ARGS, wpre, GvRope{});
}
extern "C" __global__ void __maxnreg__(64) k_gemv16p_bf16(GEMV16_PARAMS, int wpre) {
  preload_gemv_row(a, b, out, has_norm, wpre);
  pdl_enter();
  gemv16_body<DT_BF16, false, true>(GEMV16_ARGS, wpre, GvRope{});
}
extern "C" __global__ void __maxnreg__(64) k_gemv16p_f16(GEMV16_PARAMS, int wpre) {
  preload_gemv_row(a, b, out, has_norm, wpre);
  pdl_enter();
  gemv16_body<DT_F16, false, true>(GEMV16_ARGS, wpre, GvRope{});
}

// k_gemv16 with the decode step's RoPE / KV-cache group in its epilogue (GvRope): one launch
// fewer a layer. Its parameters past k_gemv16's are GvRope's fields in order.
#undef NPU_KBIT
#define NPU_KBIT 2
#define GV_ROPE_PARAMS                                                                                        \
  const unsigned short *c0, const unsigned short *s0, const unsigned short *c1, const unsigned short *s1,   \
      unsigned short *o0, unsigned short *o1, unsigned short *kc, unsigned short *vc, i64 cs0, i64 ss0,       \
      i64 os0, i64 cs1, i64 ss1, i64 os1, i64 kcs, i64 kcp, i64 vcs, i64 vcp, i64 T, const void *pos,       \
      int pos64, int rows0, int rows1, int step_k, int step_v, unsigned hh, int *err
#define GV_ROPE_ARGS                                                                                          \
  GvRope{c0, s0, c1, s1, o0, o1, kc, vc, cs0, ss0, os0, cs1, ss1, os1, kcs, kcp, vcs, vcp, T, pos, pos64, rows0, \
         rows1, step_k, step_v, hh, err}
extern "C" __global__ void __launch_bounds__(256) k_gemv16_rope(GEMV16_PARAMS, GV_ROPE_PARAMS) {
  prefetch_l2_gemv_row(a, b, out, hh);
  pdl_enter();
  gemv16_body<-1, true, false>(GEMV16_ARGS, 0, GV_ROPE_ARGS);
}
extern "C" __global__ void __launch_bounds__(256) k_gemv16_rope_bf16(GEMV16_PARAMS, GV_ROPE_PARAMS) {
  prefetch_l2_gemv_row(a, b, out, hh);
  pdl_enter();
  gemv16_body<DT_BF16, true, false>(GEMV16_ARGS, 0, GV_ROPE_ARGS);
}
extern "C" __global__ void __launch_bounds__(256) k_gemv16_rope_f16(GEMV16_PARAMS, GV_ROPE_PARAMS) {
  prefetch_l2_gemv_row(a, b, out, hh);
  pdl_enter();
  gemv16_body<DT_F16, true, false>(GEMV16_ARGS, 0, GV_ROPE_ARGS);
}
extern "C" __global__ void __launch_bounds__(256) k_gemv16p_rope(GEMV16_PARAMS, int wpre, GV_ROPE_PARAMS) {
  preload_gemv_row(a, b, out, has_norm, wpre, hh);
  pdl_enter();
  gemv16_body<-1, true, true>(GEMV16_ARGS, wpre, GV_ROPE_ARGS);
}
extern "C" __global__ void __launch_bounds__(256) k_gemv16p_rope_bf16(GEMV16_PARAMS, int wpre, GV_ROPE_PARAMS) {
  preload_gemv_row(a, b, out, has_norm, wpre, hh);
  pdl_enter();
  gemv16_body<DT_BF16, true, true>(GEMV16_ARGS, wpre, GV_ROPE_ARGS);
}
extern "C" __global__ void __launch_bounds__(256) k_gemv16p_rope_f16(GEMV16_PARAMS, int wpre, GV_ROPE_PARAMS) {
  preload_gemv_row(a, b, out, has_norm, wpre, hh);
  pdl_enter();
  gemv16_body<DT_F16, true, true>(GEMV16_ARGS, wpre, GV_ROPE_ARGS);
}

#undef NPU_KBIT
#define NPU_KBIT 32
// im2col with a 2-D grid: y over the kc rows (grid-stride), x over the N * pix columns with
// 32-bit index math. Same layout as k_im2col.
extern "C" __global__ void k_im2col2(TD x, int c0, int cg, int kh, int kw, int sh, int sw, int ph, int pw,
                                     int dh, int dw, int OH, int OW, u64 col, int col_dt) {
  pdl_enter();
  int N = (int)x.sh[0], H = (int)x.sh[2], W = (int)x.sh[3];
  int pix = OH * OW, cols = N * pix, rows = cg * kh * kw;
  for (int row = blockIdx.y; row < rows; row += gridDim.y) {
    int j = row % kw, i = (row / kw) % kh, ci = row / (kw * kh);
    i64 cbase = (i64)(c0 + ci) * x.st[1];
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
      int n = c / pix, p = c - n * pix;
      int oy = p / OW, ox = p - oy * OW;
      int yy = oy * sh - ph + i * dh, xx = ox * sw - pw + j * dw;
      float v = 0.0f;
      if (yy >= 0 && yy < H && xx >= 0 && xx < W) v = ld(x, n * x.st[0] + cbase + yy * x.st[2] + xx * x.st[3]);
      st_dt(col, col_dt, (i64)row * cols + c, v);
    }
  }
}

// im2col into a 16-bit column matrix, eight consecutive columns per thread and one 16-byte
// store (cols % 8 == 0): the one-element version launched ~450k blocks of 256 single stores
// for a batch-64 3x3 convolution and ran at a sixth of the copy bandwidth. Same layout as
// k_im2col; an input already in the column dtype is copied bit for bit.
extern "C" __global__ void k_im2col8(TD x, int c0, int cg, int kh, int kw, int sh, int sw, int ph, int pw,
                                     int dh, int dw, int OH, int OW, u64 col, int col_dt) {
  pdl_enter();
  const int H = (int)x.sh[2], W = (int)x.sh[3];
  const int pix = OH * OW, cols = (int)x.sh[0] * pix, c8 = cols / 8;
  const i64 total = (i64)cg * kh * kw * c8;
  const bool raw = x.dt == col_dt;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    const int row = (int)(e / c8), c = (int)(e - (i64)row * c8) * 8;
    const int j = row % kw, i = (row / kw) % kh, ci = row / (kw * kh);
    const i64 cbase = (i64)(c0 + ci) * x.st[1];
    int n = c / pix, p = c - n * pix;
    int oy = p / OW, ox = p - oy * OW;
    unsigned int h[8];
    for (int t = 0; t < 8; ++t) {
      const int yy = oy * sh - ph + i * dh, xx = ox * sw - pw + j * dw;
      unsigned int b = 0;
      if (yy >= 0 && yy < H && xx >= 0 && xx < W) {
        const i64 off = n * x.st[0] + cbase + yy * x.st[2] + xx * x.st[3];
        if (raw) {
          b = ((const unsigned short*)x.ptr)[off];
        } else {
          const float v = ld(x, off);
          b = col_dt == DT_BF16 ? f32_to_bf16(v) : f32_to_f16(v);
        }
      }
      h[t] = b;
      if (++ox == OW) {
        ox = 0;
        if (++oy == OH) {
          oy = 0;
          ++n;
        }
      }
    }
    uint4 u;
    u.x = h[0] | (h[1] << 16);
    u.y = h[2] | (h[3] << 16);
    u.z = h[4] | (h[5] << 16);
    u.w = h[6] | (h[7] << 16);
    ((uint4*)col)[((i64)row * cols + c) >> 3] = u;
  }
}

// Conv epilogue with a 2-D grid: y over output channels of the group, x over N * pix.
extern "C" __global__ void k_conv_epilogue2(const float* c, i64 ldc, i64 o0, TD bias, int has_bias, int act,
                                            TD out, i64 og) {
  pdl_enter();
  int N = (int)out.sh[0], OW = (int)out.sh[3];
  int pix = (int)out.sh[2] * OW, cols = N * pix;
  for (i64 o = blockIdx.y; o < og; o += gridDim.y) {
    float bv = has_bias ? ld(bias, (o0 + o) * bias.st[bias.rank - 1]) : 0.0f;
    i64 obase = (o0 + o) * out.st[1];
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < cols; e += gridDim.x * blockDim.x) {
      int n = e / pix, p = e - n * pix;
      int oy = p / OW, ox = p - oy * OW;
      float v = c[o * ldc + e] + bv;
      if (act >= 0) v = apply_unary(act, v);
      st(out, n * out.st[0] + obase + oy * out.st[2] + ox * out.st[3], v);
    }
  }
}
