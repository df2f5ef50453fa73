// Flash-decoding attention (SIMT): grid (split, s, b * kvh), one warp per query head of the
// KV group, so K/V tiles are read once for all heads sharing them (GQA without expansion).
// Each split runs an online softmax over its range of key positions and writes (m, l,
// acc[D]) partials; k_attn_combine merges the splits. Masked slots (additive mask at or
// below -65504, causal t > s) get probability exactly 0 and fully masked tiles are skipped
// (found for 32 tiles at a time, see k_attn).

#define AT 32
#define MAXD 256
#define MASKED -65504.0f

__device__ __forceinline__ void load_tile(const TD& t, i64 base, i64 t0, i64 tn, int D, float* dst, int ld_dst) {
  // dst[row * ld_dst + d] = t[base + (t0 + row) * st2 + d * st3], rows < tn (others zero).
  bool vec = (t.dt == DT_BF16 || t.dt == DT_F16) && t.st[3] == 1 && (D % 8) == 0 && (t.st[2] % 8) == 0 &&
             (base % 8) == 0 && (t.ptr % 16) == 0;
  if (vec) {
    int per = D / 8;
    for (int idx = threadIdx.x; idx < AT * per; idx += blockDim.x) {
      int row = idx / per, c = (idx % per) * 8;
      float f[8];
      if (row < tn) {
        unpack8(*(const uint4*)((const unsigned short*)t.ptr + base + (t0 + row) * t.st[2] + c), t.dt, f);
      } else {
        for (int i = 0; i < 8; ++i) f[i] = 0.0f;
      }
      for (int i = 0; i < 8; ++i) dst[row * ld_dst + c + i] = f[i];
    }
  } else {
    for (int idx = threadIdx.x; idx < AT * D; idx += blockDim.x) {
      int row = idx / D, d = idx % D;
      dst[row * ld_dst + d] = row < tn ? ld(t, base + (t0 + row) * t.st[2] + d * t.st[3]) : 0.0f;
    }
  }
}

extern "C" __global__ void k_attn(TD q, TD k, TD v, TD mask, int has_mask, int causal, float scale, int group,
                                  int hbase, i64 split_len, int nsplit, float* part) {
  pdl_enter();
  extern __shared__ float sm[];
  int D = (int)q.sh[3];
  i64 H = q.sh[1], S = q.sh[2], T = k.sh[2], KVH = k.sh[1];
  int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* ks = sm;                       // [AT][D + 1]
  float* vs = ks + AT * (D + 1);         // [AT][D]
  float* qs = vs + AT * D;              // [nw][D]
  float* ps = qs + nw * D;              // [nw][AT]: the tile's probabilities per warp
  i64 bk = blockIdx.z, b = bk / KVH, kh = bk % KVH, s = blockIdx.y;
  int split = blockIdx.x;
  int hh = hbase + warp;
  bool active = hh < group && warp < nw;
  i64 h = kh * group + (active ? hh : 0);
  i64 t_begin = split * split_len, t_end = min(T, t_begin + split_len);
  if (causal) t_end = min(t_end, s + 1);
  for (int d = lane; d < D; d += 32)
    qs[warp * D + d] = active ? ld(q, b * q.st[0] + h * q.st[1] + s * q.st[2] + d * q.st[3]) : 0.0f;
  i64 kbase = b * k.st[0] + kh * k.st[1], vbase = b * v.st[0] + kh * v.st[1];
  i64 mbase = has_mask ? b * mask.st[0] + h * mask.st[1] + s * mask.st[2] : 0;
  float m = -NPU_INF, l = 0.0f;
  float acc[MAXD / 32];
#pragma unroll
  for (int j = 0; j < MAXD / 32; ++j) acc[j] = 0.0f;
  int nd = (D + 31) / 32;
  __shared__ unsigned chunk_bits;
  // Keys in chunks of 32 tiles. With a mask, one pass per chunk finds the tiles holding any
  // unmasked key for any of the block's heads, every mask load in flight at once; the tile
  // loop then skips the others without touching memory. A static-cache prefill row sees
  // s + 1 of T keys, so most tiles are skipped, and serial per-tile mask loads cost more
  // than the attention itself.
  for (i64 c0 = t_begin; c0 < t_end; c0 += 32 * AT) {
    unsigned bits = 0xffffffffu;
    if (has_mask) {
      float mvs[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        i64 t = c0 + (i64)i * AT + lane;
        mvs[i] = (active && t < t_end) ? ld(mask, mbase + t * mask.st[3]) : -NPU_INF;
      }
      unsigned mine = 0u;
#pragma unroll
      for (int i = 0; i < 32; ++i)
        if (__ballot_sync(0xffffffffu, !(mvs[i] <= MASKED))) mine |= 1u << i;
      __syncthreads();
      if (threadIdx.x == 0) chunk_bits = 0u;
      __syncthreads();
      if (lane == 0 && mine) atomicOr(&chunk_bits, mine);
      __syncthreads();
      bits = chunk_bits;
    }
    for (int ti = 0; ti < 32; ++ti) {
      i64 t0 = c0 + (i64)ti * AT;
      if (t0 >= t_end) break;
      if (!((bits >> ti) & 1u)) continue;
      i64 tn = min((i64)AT, t_end - t0);
      i64 t = t0 + lane;
      bool valid = active && lane < tn;
      float mv = 0.0f;
      if (valid && has_mask) {
        mv = ld(mask, mbase + t * mask.st[3]);
        if (mv <= MASKED) valid = false;
      }
      if (!__syncthreads_or(valid)) continue;
      load_tile(k, kbase, t0, tn, D, ks, D + 1);
      load_tile(v, vbase, t0, tn, D, vs, D);
      __syncthreads();
      if (__any_sync(0xffffffffu, valid)) {
        // Independent chains everywhere: a warp handles one query row, so its latency, not
        // the SM's throughput, bounds a prefill (measured 11 cycles per instruction with one
        // serial dot product and a shuffle-then-branch per key).
        float sc = -NPU_INF;
        if (valid) {
          const float* kr = ks + lane * (D + 1);
          const float* qr = qs + warp * D;
          float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
          int d = 0;
#pragma unroll 4
          for (; d + 4 <= D; d += 4) {
            d0 += qr[d] * kr[d];
            d1 += qr[d + 1] * kr[d + 1];
            d2 += qr[d + 2] * kr[d + 2];
            d3 += qr[d + 3] * kr[d + 3];
          }
          for (; d < D; ++d) d0 += qr[d] * kr[d];
          sc = ((d0 + d1) + (d2 + d3)) * scale + mv;
        }
        float mn = fmaxf(m, warp_max(sc));
        float p = valid ? expf(sc - mn) : 0.0f;
        float corr = (m == -NPU_INF) ? 0.0f : expf(m - mn);
        l = l * corr + warp_sum(p);
        // acc is indexed by compile-time j only, so it stays in registers
#pragma unroll
        for (int j = 0; j < MAXD / 32; ++j)
          if (j < nd) acc[j] *= corr;
        float* pw = ps + warp * AT;
        pw[lane] = p;
        __syncwarp();
        // A masked key's probability is exactly 0 and its V row is never read (a stale
        // cache slot may hold anything, inf or NaN included).
#pragma unroll 4
        for (int tt = 0; tt < tn; ++tt) {
          float pt = pw[tt];
          if (pt != 0.0f) {
            const float* vr = vs + tt * D;
#pragma unroll
            for (int jj = 0; jj < MAXD / 32; ++jj) {
              int dd = lane + 32 * jj;
              if (jj < nd && dd < D) acc[jj] += pt * vr[dd];
            }
          }
        }
        __syncwarp();
        m = mn;
      }
      __syncthreads();
    }
  }
  if (!active) return;
  float* pp = part + (((b * H + h) * S + s) * nsplit + split) * (i64)(D + 2);
  if (lane == 0) { pp[0] = m; pp[1] = l; }
#pragma unroll
  for (int j = 0; j < MAXD / 32; ++j) {
    int d = lane + 32 * j;
    if (j < nd && d < D) pp[2 + d] = acc[j];
  }
}

// The softmax of attention's GEMM path (plan/attention.rs), one block per row of scores:
// p = exp(x + mask - max) / sum, with a masked slot (mask <= -65504) exactly 0 and a fully
// masked row all zeros, as k_attn; the scale was applied by the GEMM. p is stored in out's
// dtype (V's, for the second GEMM). Rows of up to AS_MAX * blockDim slots are read once
// into registers, every load in flight together; longer rows are read three times.
#define AS_MAX 16
__device__ __forceinline__ float attn_score(const TD& x, const TD& mask, int has_mask, i64 xo, i64 mo,
                                            i64 i) {
  int r = x.rank;
  float v = ld(x, xo + i * x.st[r - 1]);
  if (has_mask) {
    float mv = ld(mask, mo + i * mask.st[r - 1]);
    v = mv <= MASKED ? -NPU_INF : v + mv;
  }
  return v;
}

extern "C" __global__ void k_attn_softmax(TD x, TD mask, int has_mask, TD out) {
  pdl_enter();
  int r = x.rank;
  i64 n = x.sh[r - 1], row = blockIdx.x;
  i64 xo = offset_lead(x, r - 1, row), oo = offset_lead(out, r - 1, row);
  i64 mo = has_mask ? offset_lead(mask, r - 1, row) : 0;
  i64 os = out.st[r - 1];
  if (n <= (i64)AS_MAX * blockDim.x) {
    float v[AS_MAX];
    float m = -NPU_INF;
#pragma unroll
    for (int j = 0; j < AS_MAX; ++j) {
      i64 i = threadIdx.x + (i64)j * blockDim.x;
      v[j] = i < n ? attn_score(x, mask, has_mask, xo, mo, i) : -NPU_INF;
    }
#pragma unroll
    for (int j = 0; j < AS_MAX; ++j) m = fmaxf(m, v[j]);
    m = block_max(m);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < AS_MAX; ++j) {
      v[j] = v[j] == -NPU_INF ? 0.0f : expf(v[j] - m);
      sum += v[j];
    }
    sum = block_sum(sum);
    float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
    for (int j = 0; j < AS_MAX; ++j) {
      i64 i = threadIdx.x + (i64)j * blockDim.x;
      if (i < n) st(out, oo + i * os, v[j] * inv);
    }
    return;
  }
  float m = -NPU_INF;
  for (i64 i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, attn_score(x, mask, has_mask, xo, mo, i));
  m = block_max(m);
  float sum = 0.0f;
  for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
    float v = attn_score(x, mask, has_mask, xo, mo, i);
    if (v != -NPU_INF) sum += expf(v - m);
  }
  sum = block_sum(sum);
  float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
    float v = attn_score(x, mask, has_mask, xo, mo, i);
    st(out, oo + i * os, v == -NPU_INF ? 0.0f : expf(v - m) * inv);
  }
}

// One block per (b, h, s): merges the split partials and stores the output row. The split
// weights exp(m_i - M) / L are computed once into shared memory (up to CMAX splits; more are
// recomputed per dim), then each thread sums its dims' partials with the loads in flight.
#define CMAX 1024
extern "C" __global__ void k_attn_combine(const float* part, int nsplit, TD out) {
  pdl_enter();
  __shared__ float wsh[CMAX];
  i64 H = out.sh[1], S = out.sh[2];
  int D = (int)out.sh[3];
  i64 row = blockIdx.x, s = row % S, h = (row / S) % H, b = row / (S * H);
  const float* pp = part + row * nsplit * (i64)(D + 2);
  float M = -NPU_INF;
  for (int i = threadIdx.x; i < nsplit; i += blockDim.x) M = fmaxf(M, pp[i * (D + 2)]);
  M = block_max(M);
  float L = 0.0f;
  for (int i = threadIdx.x; i < nsplit; i += blockDim.x) {
    float mi = pp[i * (D + 2)];
    float w = mi == -NPU_INF ? 0.0f : expf(mi - M);
    if (i < CMAX) wsh[i] = w;
    L += pp[i * (D + 2) + 1] * w;
  }
  L = block_sum(L);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    const float* pd = pp + 2 + d;
    // eight loads in flight per round, no branch between them (ncu: with the weight's
    // recompute branch in the loop, each load waited for the one before: 31 us per call)
    float a[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int ncached = min(nsplit, CMAX), i = 0;
    for (; i + 8 <= ncached; i += 8) {
      float x[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) x[u] = pd[(i + u) * (i64)(D + 2)];
#pragma unroll
      for (int u = 0; u < 8; ++u) a[u] += x[u] * wsh[i + u];
    }
    for (; i < nsplit; ++i) {
      float w;
      if (i < CMAX) {
        w = wsh[i];
      } else {
        float mi = pp[i * (D + 2)];
        w = mi == -NPU_INF ? 0.0f : expf(mi - M);
      }
      a[0] += pd[i * (i64)(D + 2)] * w;
    }
    float sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    st(out, b * out.st[0] + h * out.st[1] + s * out.st[2] + d * out.st[3], L > 0.0f ? sum / L : 0.0f);
  }
}

// Decode attention (one query row, S == 1, head dim <= 128): grid (split, B * KVH), 128
// threads (4 warps). A
// block covers the keys [split * split_len, ..) of one KV head for all `group` (<= DMAXG)
// query heads of it, in tiles of 32 keys, one key per lane: warp w scores the tile for heads
// w, w + 4 (its lane's K row straight into registers, 16-byte loads where the layout allows),
// then runs their online softmax with warp reductions; thread d then accumulates p * v[t][d]
// for every head with the tile's 32 V values loaded up front. Every loop issues its loads
// before it uses them: the kernel is latency-bound, not bandwidth-bound, at decode sizes.
// Masked slots (<= -65504) get probability exactly 0; fully masked tiles are skipped.
// Partials (m, l, acc[D]) per split as k_attn's, merged by k_attn_combine; q is pre-scaled.
#define DMAXG 8
#define DEC_MAXD 128
// k_attn_dec's prefetch: the block's K and V rows into L2 (16-bit caches with contiguous
// rows; up to 64 KB each), while the previous kernel (the cache write) finishes. Address
// arithmetic on the parameters only.
__device__ __forceinline__ void prefetch_l2_attn_rows(const TD& t, i64 split_len) {
  if (threadIdx.x != 0 || !is16_dt(t.dt) || t.st[3] != 1 || t.st[2] != t.sh[3]) return;
  i64 kh = blockIdx.y % t.sh[1], b = blockIdx.y / t.sh[1];
  i64 t0 = blockIdx.x * split_len, t1 = min(t.sh[2], t0 + split_len);
  if (t1 <= t0) return;
  const unsigned short* p = (const unsigned short*)t.ptr + b * t.st[0] + kh * t.st[1] + t0 * t.st[2];
  prefetch_l2(p, min((u64)((t1 - t0) * t.st[2] * 2), (u64)65536));
}

extern "C" __global__ void __launch_bounds__(128) k_attn_dec(TD q, TD k, TD v, TD mask, int has_mask, float scale,
                                                             int group, i64 split_len, int nsplit, float* part) {
  prefetch_l2_attn_rows(k, split_len);
  prefetch_l2_attn_rows(v, split_len);
  pdl_enter();
  __shared__ float qs[DMAXG][DEC_MAXD];
  __shared__ float ps[DMAXG][32];
  __shared__ float corr_s[DMAXG];
  __shared__ unsigned tile_keys;  // bit tt: key t0 + tt is in range and not masked
  int D = (int)q.sh[3];
  i64 H = q.sh[1], T = k.sh[2], KVH = k.sh[1];
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  i64 bk = blockIdx.y, b = bk / KVH, kh = bk % KVH;
  int split = blockIdx.x;
  i64 t_begin = split * split_len, t_end = min(T, t_begin + split_len);
  if (is16_dt(q.dt)) {
    // every load issued before any is used: a load behind ld()'s dtype switch waits for the
    // one before it (ncu: 35 us per call, a few thousand instructions at one memory
    // latency each)
    unsigned short raw[DMAXG * DEC_MAXD / 128];
#pragma unroll
    for (int j = 0; j < DMAXG * DEC_MAXD / 128; ++j) {
      int idx = min(tid + 128 * j, group * D - 1), g = idx / D, d = idx % D;
      raw[j] = ((const unsigned short*)q.ptr)[b * q.st[0] + (kh * group + g) * q.st[1] + d * q.st[3]];
    }
#pragma unroll
    for (int j = 0; j < DMAXG * DEC_MAXD / 128; ++j) {
      int idx = tid + 128 * j;
      if (idx < group * D) qs[idx / D][idx % D] = h16_to_f32(raw[j], q.dt) * scale;
    }
  } else {
    for (int idx = tid; idx < group * D; idx += 128) {
      int g = idx / D, d = idx % D;
      qs[g][d] = ld(q, b * q.st[0] + (kh * group + g) * q.st[1] + d * q.st[3]) * scale;
    }
  }
  i64 kbase = b * k.st[0] + kh * k.st[1], vbase = b * v.st[0] + kh * v.st[1];
  // the query row's mask (its head stride is 0, or group == 1: see the planner)
  i64 mbase = has_mask ? b * mask.st[0] + (kh * group) * mask.st[1] : 0;
  bool kvec = (k.dt == DT_BF16 || k.dt == DT_F16) && k.st[3] == 1 && (D % 8) == 0 && (k.st[2] % 8) == 0 &&
              (kbase % 8) == 0 && (k.ptr % 16) == 0;
  // online softmax state of this warp's heads (lane-uniform)
  float m_w[2] = {-NPU_INF, -NPU_INF}, l_w[2] = {0.0f, 0.0f};
  float acc[DMAXG];
#pragma unroll
  for (int g = 0; g < DMAXG; ++g) acc[g] = 0.0f;
  __syncthreads();
  for (i64 t0 = t_begin; t0 < t_end; t0 += 32) {
    int tn = (int)min((i64)32, t_end - t0);
    i64 t = t0 + lane;
    bool valid = lane < tn;
    float mv = 0.0f;
    if (valid && has_mask) {
      mv = ld(mask, mbase + t * mask.st[3]);
      if (mv <= MASKED) valid = false;
    }
    if (!__syncthreads_or(valid)) continue;
    // scores of this lane's key for the warp's heads (g0 = warp, g1 = warp + 4), the K row
    // streamed 8 dims at a time into both dot products
    int g0 = warp, g1 = warp + 4;
    float dot0 = 0.0f, dot1 = 0.0f;
    if (kvec) {
      // every lane loads a row (the last one of the range past its end), all 16-byte loads
      // in flight together; only valid lanes use theirs
      const uint4* kp = (const uint4*)((const unsigned short*)k.ptr + kbase + min(t, t_end - 1) * k.st[2]);
      uint4 kr[DEC_MAXD / 8];
#pragma unroll
      for (int c = 0; c < DEC_MAXD / 8; ++c)
        if (c * 8 < D) kr[c] = kp[c];
      if (valid) {
#pragma unroll
        for (int c = 0; c < DEC_MAXD / 8; ++c) {
          if (c * 8 < D) {
            float kf[8];
            unpack8(kr[c], k.dt, kf);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
              dot0 += qs[g0][c * 8 + i] * kf[i];
              dot1 += qs[g1 < group ? g1 : g0][c * 8 + i] * kf[i];
            }
          }
        }
      }
    } else if (valid) {
      i64 ko = kbase + t * k.st[2];
      {
        for (int d = 0; d < D; ++d) {
          float kv = ld(k, ko + d * k.st[3]);
          dot0 += qs[g0][d] * kv;
          dot1 += qs[g1 < group ? g1 : g0][d] * kv;
        }
      }
    }
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      int g = warp + 4 * hi;
      if (g >= group) break;
      float sc = valid ? (hi == 0 ? dot0 : dot1) + mv : -NPU_INF;
      float mx = warp_max(sc);
      float mn = fmaxf(m_w[hi], mx);
      float p = valid ? expf(sc - mn) : 0.0f;
      float corr = (m_w[hi] == -NPU_INF) ? 0.0f : expf(m_w[hi] - mn);
      l_w[hi] = l_w[hi] * corr + warp_sum(p);
      m_w[hi] = mn;
      ps[g][lane] = p;
      if (lane == 0) corr_s[g] = corr;
    }
    // the mask row is shared by the group's heads, so every warp's `valid` is the same
    unsigned keys = __ballot_sync(0xffffffffu, valid);
    if (tid == 0) tile_keys = keys;
    __syncthreads();
    // p * V for every head; thread d owns dim d
    if (tid < D) {
      float vv[32];
      if (is16_dt(v.dt)) {
        // rows past the tile's end load its last row (in bounds, all loads in flight); those
        // and masked rows (a stale cache slot may hold NaN or inf, and 0 * inf is NaN) are 0
        const unsigned short* vp = (const unsigned short*)v.ptr + vbase + tid * v.st[3];
        unsigned short raw[32];
#pragma unroll
        for (int tt = 0; tt < 32; ++tt) raw[tt] = vp[(t0 + min(tt, tn - 1)) * v.st[2]];
#pragma unroll
        for (int tt = 0; tt < 32; ++tt) vv[tt] = (tile_keys >> tt) & 1u ? h16_to_f32(raw[tt], v.dt) : 0.0f;
      } else {
#pragma unroll
        for (int tt = 0; tt < 32; ++tt)
          vv[tt] = (tile_keys >> tt) & 1u ? ld(v, vbase + (t0 + tt) * v.st[2] + tid * v.st[3]) : 0.0f;
      }
#pragma unroll
      for (int g = 0; g < DMAXG; ++g) {
        if (g < group) {
          float a = acc[g] * corr_s[g];
#pragma unroll
          for (int tt = 0; tt < 32; ++tt) a += ps[g][tt] * vv[tt];
          acc[g] = a;
        }
      }
    }
    __syncthreads();
  }
  // m and l of each head from the warp that ran its softmax, then acc from every thread
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    int g = warp + 4 * hi;
    if (g < group && lane == 0) {
      float* pp = part + ((b * H + kh * group + g) * nsplit + split) * (i64)(D + 2);
      pp[0] = m_w[hi];
      pp[1] = l_w[hi];
    }
  }
#pragma unroll
  for (int g = 0; g < DMAXG; ++g) {
    if (g < group && tid < D) {
      float* pp = part + ((b * H + kh * group + g) * nsplit + split) * (i64)(D + 2);
      pp[2 + tid] = acc[g];
    }
  }
}
