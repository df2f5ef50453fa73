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

// Prefill attention on tensor cores (16-bit q/k/v, head dim a multiple of 16 up to 128):
// grid (query tiles of MQ_ROWS rows, H, B), 8 warps: warp w takes query rows 16 (w % MQ_RG) ..
// and the key slice w / MQ_RG (MQ_KW keys) of every tile, with its own online softmax; the
// slices merge through shared memory at the end. The kernel is latency-bound (few blocks, each
// warp's instruction chain exposed: 4 warps walking whole tiles took 50 us a layer for
// Qwen2.5-1.5B's prefill, 64-row blocks of 2 key halves 38 us under ncu), so work is cut into
// short chains: 32-row blocks, 16 keys a warp. Key tiles of
// MQ_KEYS keys are staged in shared memory (K as [key][d], V transposed as [d][key]); S = Q K^T
// and O += P V are mma.sync m16n8k16 with f32 accumulation, the softmax online per row in
// registers (FlashAttention-2's order). A key tile that no row of the block attends is skipped
// without touching K or V: k_attn_tiles marks the live (query tile, key tile) pairs of the mask
// once per step, every mask load in flight, so a 128-row prefill over a 2048-slot static cache
// reads 2 of 32 key tiles. Masked slots (<= -65504, causal t > s, t >= T) get probability
// exactly 0, a fully masked row is zeros (as k_attn), and a key no row of the block attends has
// its V row taken as zero: a stale cache slot holding inf must not give 0 x inf = NaN.
#define MQ_ROWS 32
#define MQ_RG (MQ_ROWS / 16)  // row groups of 16 rows (one m16 tile each)
#define MQ_NKS (8 / MQ_RG)  // key slices of a tile: 8 warps = MQ_RG x MQ_NKS
#define MQ_KEYS 64
#define MQ_KW (MQ_KEYS / MQ_NKS)  // keys of a tile per warp
#define MQ_MAXD 128

// Marks each (query tile, key tile) of the mask that holds an attended slot: grid (key tiles,
// query tiles, distinct (batch, head) rows of the mask), flags[((bh * nqt) + qt) * nkt + kt].
extern "C" __global__ void k_attn_tiles(TD mask, unsigned char* flags) {
  pdl_enter();
  i64 S = mask.sh[2], T = mask.sh[3];
  i64 nh = mask.st[1] != 0 ? mask.sh[1] : 1;
  i64 bh = blockIdx.z, b = bh / nh, h = bh % nh;
  i64 r0 = (i64)blockIdx.y * MQ_ROWS, t0 = (i64)blockIdx.x * MQ_KEYS;
  i64 base = b * mask.st[0] + h * mask.st[1];
  bool live = false;
  if (is16_dt(mask.dt) && mask.st[3] == 1 && (mask.st[2] % 8) == 0 && (base % 8) == 0 && (mask.ptr % 16) == 0 &&
      (T % 8) == 0) {
    // 16-bit mask rows with contiguous keys: eight keys per 16-byte load, two loads a thread
    const unsigned short* mp = (const unsigned short*)mask.ptr + base;
    uint4 u[MQ_ROWS * MQ_KEYS / 8 / 256];
    bool in[MQ_ROWS * MQ_KEYS / 8 / 256];
#pragma unroll
    for (int i = 0; i < MQ_ROWS * MQ_KEYS / 8 / 256; ++i) {
      int e = threadIdx.x + i * 256;
      i64 r = r0 + e / (MQ_KEYS / 8), t = t0 + (e % (MQ_KEYS / 8)) * 8;
      in[i] = r < S && t < T;
      u[i] = in[i] ? *(const uint4*)(mp + r * mask.st[2] + t) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < MQ_ROWS * MQ_KEYS / 8 / 256; ++i) {
      if (!in[i]) continue;
      unsigned w[4] = {u[i].x, u[i].y, u[i].z, u[i].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        live |= !(h16_to_f32(w[j] & 0xffff, mask.dt) <= MASKED);
        live |= !(h16_to_f32(w[j] >> 16, mask.dt) <= MASKED);
      }
    }
  } else {
    const int per = MQ_ROWS * MQ_KEYS / 256;
    float mv[per];
#pragma unroll
    for (int i = 0; i < per; ++i) {
      int e = threadIdx.x + i * 256;
      i64 r = r0 + e / MQ_KEYS, t = t0 + e % MQ_KEYS;
      mv[i] = (r < S && t < T) ? ld(mask, base + r * mask.st[2] + t * mask.st[3]) : -NPU_INF;
    }
#pragma unroll
    for (int i = 0; i < per; ++i) live |= !(mv[i] <= MASKED);
  }
  live = __syncthreads_or(live);
  if (threadIdx.x == 0) flags[(bh * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x] = live ? 1 : 0;
}

template <bool BF>
__device__ __forceinline__ void mma16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  if (BF) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats as one word of 16-bit values (lo in the low half), round to nearest even: one
// cvt for both (sm_80+; `a` goes to the upper half).
template <bool BF>
__device__ __forceinline__ unsigned pack_h2(float lo, float hi) {
  unsigned r;
  if (BF) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// pack_h2 for a 16-bit dtype known at run time (dt: DT_F16 or DT_BF16).
__device__ __forceinline__ unsigned pack_h2_dt(int dt, float lo, float hi) {
  return dt == DT_BF16 ? pack_h2<true>(lo, hi) : pack_h2<false>(lo, hi);
}

// Two adjacent 16-bit elements of t at element offset `off` (even, 4-byte aligned) as one word.
__device__ __forceinline__ unsigned ld_pair(const TD& t, i64 off) {
  return *(const unsigned*)((const unsigned short*)t.ptr + off);
}

// Rows of t from element `base` that 16-byte copies can stage: contiguous along the last dim,
// every row start 16-byte aligned (16-bit elements).
__device__ __forceinline__ bool rows_vec16(const TD& t, i64 base) {
  return t.st[3] == 1 && (t.st[2] % 8) == 0 && (base % 8) == 0 && (t.ptr % 16) == 0;
}

// Stages keys t0 .. t0 + MQ_KEYS - 1 of a K or V tile as [key][d] rows MQ_MAXD + 8 apart, zeros
// past T: 16-byte cp.async copies (all in flight, no registers) where rows are contiguous and
// aligned, element loads otherwise. The caller waits (cp_async_wait) and syncs.
__device__ __forceinline__ void mq_stage(const TD& t, i64 base, i64 t0, int D, unsigned short* dst) {
  i64 T = t.sh[2];
  const unsigned short* src = (const unsigned short*)t.ptr;
  bool vec = rows_vec16(t, base);
  int per = D / 8;
  for (int idx = threadIdx.x; idx < MQ_KEYS * per; idx += blockDim.x) {
    int row = idx / per, c = (idx % per) * 8;
    i64 tt = t0 + row;
    unsigned short* d = dst + row * (MQ_MAXD + 8) + c;
    if (vec) {
      // rows past T: a 0-byte source fills the 16 bytes with zeros
      cp_async16(d, src + base + min(tt, T - 1) * t.st[2] + c, tt < T);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) d[i] = tt < T ? src[base + tt * t.st[2] + (c + i) * t.st[3]] : 0;
    }
  }
  cp_async_commit();
}

// Four 8x8 16-bit matrices from shared memory, lane l giving row l & 7 of matrix l >> 3; lane
// t receives row t / 4, columns 2 (t % 4) and + 1 of each (an A fragment's layout).
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const unsigned short* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// The transpose of an 8x8 16-bit matrix held a row fragment a lane (row t / 4, columns
// 2 (t % 4) and + 1), in the same layout.
__device__ __forceinline__ unsigned movmatrix_trans(unsigned x) {
  unsigned r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(x));
  return r;
}

// B fragments of O += P V for one 16-key step and two 8-dim tiles: V stored [key][d], read
// transposed by ldmatrix (lanes 0-15 address keys 0-15 at dims n0, lanes 16-31 at n0 + 8).
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const unsigned short* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// O += P V over one 16-key step: `pa` P's A fragments, V's B fragments by ldmatrix.trans from
// `vrow` (this lane's key row of the step and dim half, see above), the two key pairs of the
// lane's fragments zeroed through `za` / `zb` (a masked key's V row may hold inf or NaN).
template <bool BF>
__device__ __forceinline__ void mma_pv16(float (*acc)[4], const unsigned* pa, const unsigned short* vrow,
                                         unsigned za, unsigned zb, int ndn) {
#pragma unroll
  for (int dn = 0; dn < MQ_MAXD / 8; dn += 2) {
    if (dn < ndn) {
      unsigned bf[4];
      ldmatrix_x4_trans(bf, vrow + dn * 8);
      mma16816<BF>(acc[dn], pa, bf[0] & za, bf[1] & zb);
      mma16816<BF>(acc[dn + 1], pa, bf[2] & za, bf[3] & zb);
    }
  }
}

#define MQ_XCH (4 + MQ_MAXD / 2)  // a lane's m0, m1, l0, l1 and acc in the slices' exchange
static_assert((MQ_NKS / 2) * MQ_RG * 32 * MQ_XCH * 4 <= 2 * MQ_KEYS * (MQ_MAXD + 8) * 2,
              "the slices' exchange fits in the K and V tiles");
#define MQ_MAXT 1024  // key tiles whose live flags a block keeps in shared memory (65536 keys)

template <bool BF>
__device__ __forceinline__ void attn_mma_body(const TD& q, const TD& k, const TD& v, const TD& mask, int has_mask,
                                              int causal, float scale, int group, const unsigned char* flags,
                                              int nkt, const TD& out, unsigned short* ks, unsigned short* vs,
                                              unsigned* keys_live, unsigned* tiles_live, unsigned short* mt) {
  const int D = (int)q.sh[3], nkc = D / 16, ndn = D / 8;
  const i64 H = q.sh[1], S = q.sh[2], T = k.sh[2];
  const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  // rows 16 rg .. of the block, keys k0 .. k0 + MQ_KW - 1 of each tile (key slice ksl)
  const int rg = (threadIdx.x >> 5) % MQ_RG, ksl = (threadIdx.x >> 5) / MQ_RG, k0 = ksl * MQ_KW;
  const i64 qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kh = h / group;
  const i64 r0 = qt * MQ_ROWS + rg * 16 + g, r1 = r0 + 8;
  const i64 qbase = b * q.st[0] + h * q.st[1];
  const i64 last_row = min(S - 1, qt * MQ_ROWS + MQ_ROWS - 1);
  // Key tiles to visit: the mask's live flags (all loads in flight), or every tile up to the
  // causal bound. Tiles past MQ_MAXT are visited unconditionally (their keys still masked).
  const int nlist = min(nkt, MQ_MAXT);
  for (int w = threadIdx.x; w < MQ_MAXT / 32; w += blockDim.x) tiles_live[w] = 0u;
  __syncthreads();
  if (has_mask) {
    i64 nh = mask.st[1] != 0 ? H : 1, bh = (mask.st[0] != 0 ? b : 0) * nh + (mask.st[1] != 0 ? h : 0);
    const unsigned char* fl = flags + (bh * gridDim.x + qt) * nkt;
    for (int kt = threadIdx.x; kt < nlist; kt += blockDim.x)
      if (fl[kt]) atomicOr(&tiles_live[kt >> 5], 1u << (kt & 31));
  } else {
    for (int kt = threadIdx.x; kt < nlist; kt += blockDim.x)
      if (!causal || (i64)kt * MQ_KEYS <= last_row) atomicOr(&tiles_live[kt >> 5], 1u << (kt & 31));
  }
  // Q as A fragments (rows r0/r1, dims kc*16 + tq*2 (+8)), kept in registers.
  unsigned qa[MQ_MAXD / 16][4];
#pragma unroll
  for (int kc = 0; kc < MQ_MAXD / 16; ++kc) {
    if (kc < nkc) {
      i64 d = kc * 16 + tq * 2;
      qa[kc][0] = r0 < S ? ld_pair(q, qbase + r0 * q.st[2] + d) : 0u;
      qa[kc][1] = r1 < S ? ld_pair(q, qbase + r1 * q.st[2] + d) : 0u;
      qa[kc][2] = r0 < S ? ld_pair(q, qbase + r0 * q.st[2] + d + 8) : 0u;
      qa[kc][3] = r1 < S ? ld_pair(q, qbase + r1 * q.st[2] + d + 8) : 0u;
    }
  }
  float acc[MQ_MAXD / 8][4];
#pragma unroll
  for (int dn = 0; dn < MQ_MAXD / 8; ++dn) acc[dn][0] = acc[dn][1] = acc[dn][2] = acc[dn][3] = 0.0f;
  float m0 = -NPU_INF, m1 = -NPU_INF, l0 = 0.0f, l1 = 0.0f;
  const i64 kbase = b * k.st[0] + kh * k.st[1], vbase = b * v.st[0] + kh * v.st[1];
  const i64 mrow = has_mask ? b * mask.st[0] + h * mask.st[1] : 0;
  const bool mask_smem = has_mask && is16_dt(mask.dt) && mask.st[3] == 1 && (mask.st[2] % 8) == 0 &&
                         (mrow % 8) == 0 && (mask.ptr % 16) == 0 && (T % 8) == 0;
  __syncthreads();  // tiles_live complete
  for (int kt = 0; kt < nkt; ++kt) {
    if (kt < nlist) {
      unsigned word = tiles_live[kt >> 5] >> (kt & 31);
      if (word == 0u) {
        kt |= 31;  // no live tile in the rest of this word
        continue;
      }
      kt += __ffs(word) - 1;  // the next live tile
    }
    const i64 t0 = (i64)kt * MQ_KEYS;
    if (causal && t0 > last_row) break;
    __syncthreads();  // the previous tile's readers are done with ks / vs
    if (threadIdx.x < 2) keys_live[threadIdx.x] = 0u;
    mq_stage(k, kbase, t0, D, ks);
    mq_stage(v, vbase, t0, D, vs);
    // The tile's mask: 16-bit rows with contiguous keys are copied into shared memory with K
    // and V; other masks are read per element below.
    if (mask_smem) {
      for (int idx = threadIdx.x; idx < MQ_ROWS * (MQ_KEYS / 8); idx += blockDim.x) {
        int row = idx / (MQ_KEYS / 8), c = (idx % (MQ_KEYS / 8)) * 8;
        i64 r = min(qt * MQ_ROWS + row, S - 1), tt = t0 + c;
        cp_async16(mt + row * (MQ_KEYS + 8) + c,
                   (const unsigned short*)mask.ptr + mrow + r * mask.st[2] + min(tt, T - 8), tt < T);
      }
      cp_async_commit();
    }
    cp_async_wait();
    __syncthreads();
    // S = Q K^T for this warp's 16 rows and its half of the tile's keys (n-tiles of 8 keys).
    float sc[MQ_KW / 8][4];
#pragma unroll
    for (int nt = 0; nt < MQ_KW / 8; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < MQ_MAXD / 16; ++kc) {
      if (kc < nkc) {
#pragma unroll
        for (int nt = 0; nt < MQ_KW / 8; ++nt) {
          const unsigned short* kr = ks + (k0 + nt * 8 + g) * (MQ_MAXD + 8) + kc * 16 + tq * 2;
          mma16816<BF>(sc[nt], qa[kc], *(const unsigned*)kr, *(const unsigned*)(kr + 8));
        }
      }
    }
    // Scale, mask, and the keys some row of the block attends (32-bit bounds: a tile's keys
    // and rows are relative to t0 and the block's first row).
    unsigned live_lo = 0u, live_hi = 0u;
    const int tlim = (int)min((i64)MQ_KEYS, T - t0);
    const int rb = rg * 16 + g;
    const int rlim = (int)min((i64)MQ_ROWS, S - qt * MQ_ROWS);
    const int cdiag = causal ? (int)(qt * MQ_ROWS - t0) : 1 << 30;  // key kk is past row rr when kk > rr + cdiag
#pragma unroll
    for (int nt = 0; nt < MQ_KW / 8; ++nt) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int rr = rb + (j < 2 ? 0 : 8);
        const int kk = k0 + nt * 8 + tq * 2 + (j & 1);
        float mv = 0.0f;
        if (mask_smem) {
          mv = h16_to_f32(mt[rr * (MQ_KEYS + 8) + kk], mask.dt);
        } else if (has_mask) {
          i64 row = min(qt * MQ_ROWS + rr, S - 1), t = min(t0 + kk, T - 1);
          mv = ld(mask, mrow + row * mask.st[2] + t * mask.st[3]);
        }
        bool ok = rr < rlim && kk < tlim && kk <= rr + cdiag && !(mv <= MASKED);
        sc[nt][j] = ok ? sc[nt][j] * scale + mv : -NPU_INF;
        if (ok) {
          if (kk < 32) live_lo |= 1u << kk; else live_hi |= 1u << (kk - 32);
        }
      }
    }
    live_lo = __reduce_or_sync(0xffffffffu, live_lo);
    live_hi = __reduce_or_sync(0xffffffffu, live_hi);
    if (lane == 0) {
      atomicOr(&keys_live[0], live_lo);
      atomicOr(&keys_live[1], live_hi);
    }
    // Online softmax: each thread holds 16 scores of row r0 (j = 0, 1) and of row r1 (j = 2, 3);
    // the row's four threads (one quad) reduce together.
    float mx0 = -NPU_INF, mx1 = -NPU_INF;
#pragma unroll
    for (int nt = 0; nt < MQ_KW / 8; ++nt) {
      mx0 = fmaxf(mx0, fmaxf(sc[nt][0], sc[nt][1]));
      mx1 = fmaxf(mx1, fmaxf(sc[nt][2], sc[nt][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float c0 = m0 == -NPU_INF ? 0.0f : expf(m0 - mn0), c1 = m1 == -NPU_INF ? 0.0f : expf(m1 - mn1);
    m0 = mn0;
    m1 = mn1;
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int nt = 0; nt < MQ_KW / 8; ++nt) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float mn = j < 2 ? mn0 : mn1;
        float p = sc[nt][j] == -NPU_INF ? 0.0f : expf(sc[nt][j] - mn);
        sc[nt][j] = p;
        if (j < 2) s0 += p; else s1 += p;
      }
    }
    l0 = l0 * c0 + s0;
    l1 = l1 * c1 + s1;
#pragma unroll
    for (int dn = 0; dn < MQ_MAXD / 8; ++dn) {
      acc[dn][0] *= c0;
      acc[dn][1] *= c0;
      acc[dn][2] *= c1;
      acc[dn][3] *= c1;
    }
    __syncthreads();  // keys_live complete
    const unsigned lv0 = keys_live[0], lv1 = keys_live[1];
    // O += P V: P's C fragments are the A fragments of k16 steps (two n-tiles each); V's B
    // fragments come from ldmatrix.trans, with the keys no row attends zeroed.
#pragma unroll
    for (int ks16 = 0; ks16 < MQ_KW / 16; ++ks16) {
      unsigned pa[4];
      pa[0] = pack_h2<BF>(sc[2 * ks16][0], sc[2 * ks16][1]);
      pa[1] = pack_h2<BF>(sc[2 * ks16][2], sc[2 * ks16][3]);
      pa[2] = pack_h2<BF>(sc[2 * ks16 + 1][0], sc[2 * ks16 + 1][1]);
      pa[3] = pack_h2<BF>(sc[2 * ks16 + 1][2], sc[2 * ks16 + 1][3]);
      int ka = k0 + ks16 * 16 + tq * 2, kb = ka + 8;
      unsigned lw = ka < 32 ? lv0 : lv1;
      unsigned za = ((lw >> (ka & 31)) & 1u ? 0xffffu : 0u) | ((lw >> ((ka + 1) & 31)) & 1u ? 0xffff0000u : 0u);
      unsigned zb = ((lw >> (kb & 31)) & 1u ? 0xffffu : 0u) | ((lw >> ((kb + 1) & 31)) & 1u ? 0xffff0000u : 0u);
      const unsigned short* vrow = vs + (k0 + ks16 * 16 + (lane & 15)) * (MQ_MAXD + 8) + (lane >> 4) * 8;
      mma_pv16<BF>(acc, pa, vrow, za, zb, ndn);
    }
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  // The key slices' states merge through shared memory (the K and V tiles' space, free now)
  // in halving rounds: slices [step, 2 step) hand theirs to slice - step; slice 0 stores.
  for (int step = MQ_NKS / 2; step >= 1; step /= 2) {
    __syncthreads();
    const int slot = ksl < step ? ksl : ksl - step;
    float* xch = (float*)ks + ((slot * MQ_RG + rg) * 32 + lane) * MQ_XCH;
    if (ksl >= step && ksl < 2 * step) {
      xch[0] = m0;
      xch[1] = m1;
      xch[2] = l0;
      xch[3] = l1;
#pragma unroll
      for (int dn = 0; dn < MQ_MAXD / 8; ++dn)
        if (dn < ndn)
#pragma unroll
          for (int i = 0; i < 4; ++i) xch[4 + dn * 4 + i] = acc[dn][i];
    }
    __syncthreads();
    if (ksl < step) {
      const float pm0 = xch[0], pm1 = xch[1];
      const float n0 = fmaxf(m0, pm0), n1 = fmaxf(m1, pm1);
      const float a0 = m0 == -NPU_INF ? 0.0f : expf(m0 - n0), b0 = pm0 == -NPU_INF ? 0.0f : expf(pm0 - n0);
      const float a1 = m1 == -NPU_INF ? 0.0f : expf(m1 - n1), b1 = pm1 == -NPU_INF ? 0.0f : expf(pm1 - n1);
      l0 = l0 * a0 + xch[2] * b0;
      l1 = l1 * a1 + xch[3] * b1;
      m0 = n0;
      m1 = n1;
#pragma unroll
      for (int dn = 0; dn < MQ_MAXD / 8; ++dn) {
        if (dn < ndn) {
          acc[dn][0] = acc[dn][0] * a0 + xch[4 + dn * 4] * b0;
          acc[dn][1] = acc[dn][1] * a0 + xch[5 + dn * 4] * b0;
          acc[dn][2] = acc[dn][2] * a1 + xch[6 + dn * 4] * b1;
          acc[dn][3] = acc[dn][3] * a1 + xch[7 + dn * 4] * b1;
        }
      }
    }
  }
  if (ksl != 0) return;
  const float i0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, i1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  const i64 ob = b * out.st[0] + h * out.st[1];
  const bool pairs = is16_dt(out.dt) && out.st[3] == 1 && (out.st[2] % 2) == 0 && (ob % 2) == 0 && (out.ptr % 4) == 0;
  unsigned* o0 = (unsigned*)((unsigned short*)out.ptr + ob + min(r0, S - 1) * out.st[2]);
  unsigned* o1 = (unsigned*)((unsigned short*)out.ptr + ob + min(r1, S - 1) * out.st[2]);
#pragma unroll
  for (int dn = 0; dn < MQ_MAXD / 8; ++dn) {
    if (dn < ndn) {
      int d = dn * 8 + tq * 2;
      if (pairs) {
        if (r0 < S) o0[d / 2] = pack_h2_dt(out.dt, acc[dn][0] * i0, acc[dn][1] * i0);
        if (r1 < S) o1[d / 2] = pack_h2_dt(out.dt, acc[dn][2] * i1, acc[dn][3] * i1);
        continue;
      }
      if (r0 < S) {
        st(out, ob + r0 * out.st[2] + d * out.st[3], acc[dn][0] * i0);
        st(out, ob + r0 * out.st[2] + (d + 1) * out.st[3], acc[dn][1] * i0);
      }
      if (r1 < S) {
        st(out, ob + r1 * out.st[2] + d * out.st[3], acc[dn][2] * i1);
        st(out, ob + r1 * out.st[2] + (d + 1) * out.st[3], acc[dn][3] * i1);
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) k_attn_mma(TD q, TD k, TD v, TD mask, int has_mask, int causal,
                                                             float scale, int group, const unsigned char* flags,
                                                             int nkt, TD out) {
  pdl_enter();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // One set of tiles for both instantiations (declared in the body, each would get its own).
  // K then V tile; at the end the key slices' exchange (half the slices' states, which fit)
  __shared__ __align__(16) unsigned short kvs[2 * MQ_KEYS * (MQ_MAXD + 8)];
  unsigned short *ks = kvs, *vs = kvs + MQ_KEYS * (MQ_MAXD + 8);
  __shared__ unsigned keys_live[2];
  __shared__ unsigned tiles_live[MQ_MAXT / 32];
  __shared__ __align__(16) unsigned short mt[MQ_ROWS * (MQ_KEYS + 8)];
  if (q.dt == DT_BF16) {
    attn_mma_body<true>(q, k, v, mask, has_mask, causal, scale, group, flags, nkt, out, ks, vs, keys_live,
                        tiles_live, mt);
  } else {
    attn_mma_body<false>(q, k, v, mask, has_mask, causal, scale, group, flags, nkt, out, ks, vs, keys_live,
                         tiles_live, mt);
  }
#endif
}

// Merges the split partials of one (b, h, s) row and stores it. Grid (rows, D / 32 rounded
// up), 256 threads: each block finds the row's split weights exp(m_i - M) (kept in shared
// memory up to CMAX splits, recomputed past them) and L, then its CW warps take every CW-th
// split for 32 dims, a lane per dim with eight loads in flight, and add up through shared
// memory. One block of 128 threads per row walked 171 splits (decode at 32000 keys) in 22
// dependent rounds of loads: 17 us under ncu for 12 rows. The first round's values and each
// thread's first (m, l) are loaded together, before any of them is used: at decode sizes
// (32 splits at 1000 keys) the whole merge is one round trip after the programmatic wait, not
// three (m, then m and l again, then the values); a round past the last split is predicated,
// not a loop of single loads.
#define CMAX 1024
#define CW 8
#undef NPU_KBIT
#define NPU_KBIT 8
extern "C" __global__ void __launch_bounds__(256) k_attn_combine(const float* part, int nsplit, TD out) {
  pdl_enter();
  __shared__ float wsh[CMAX];
  __shared__ float sums[CW][32];
  const int D = (int)out.sh[3];
  const i64 row = blockIdx.x;
  const i64 ld = D + 2;
  const float* pp = part + row * nsplit * ld;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int d = blockIdx.y * 32 + lane;
  // a lane past D reads a valid dim and stores nothing
  const float* pd = pp + 2 + min(d, D - 1);
  const int ncached = min(nsplit, CMAX);
  // this warp's first round of values and this thread's split's (m, l), all in flight
  float x[8];
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    const int j = warp + u * CW;
    x[u] = j < ncached ? pd[j * ld] : 0.0f;
  }
  const bool own = (int)threadIdx.x < nsplit;
  const float m_own = own ? pp[threadIdx.x * ld] : -NPU_INF;
  const float l_own = own ? pp[threadIdx.x * ld + 1] : 0.0f;
  float M = m_own;
  for (int i = threadIdx.x + blockDim.x; i < nsplit; i += blockDim.x) M = fmaxf(M, pp[i * ld]);
  M = block_max(M);
  float L = 0.0f;
  for (int i = threadIdx.x; i < nsplit; i += blockDim.x) {
    const bool first = i == (int)threadIdx.x;
    float mi = first ? m_own : pp[i * ld];
    float w = mi == -NPU_INF ? 0.0f : expf(mi - M);
    if (i < CMAX) wsh[i] = w;
    L += (first ? l_own : pp[i * ld + 1]) * w;
  }
  L = block_sum(L);  // its barriers also publish wsh
  // eight loads in flight per round, no branch between them (ncu: with the weight's
  // recompute branch in the loop, each load waited for the one before: 31 us per call)
  float a[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  for (int i = warp;;) {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int j = i + u * CW;
      if (j < ncached) a[u] += x[u] * wsh[j];
    }
    i += 8 * CW;
    if (i >= ncached) break;
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int j = i + u * CW;
      x[u] = j < ncached ? pd[j * ld] : 0.0f;
    }
  }
  // splits past CMAX: weights recomputed
  for (int i = warp + (ncached - warp + CW - 1) / CW * CW; i < nsplit; i += CW) {
    float mi = pp[i * ld];
    a[0] += pd[i * ld] * (mi == -NPU_INF ? 0.0f : expf(mi - M));
  }
  sums[warp][lane] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  __syncthreads();
  if (warp == 0 && d < D) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < CW; ++w) sum += sums[w][lane];
    // the row's (batch, head, position) in 32 bits here, off the loads' path (64-bit
    // divisions here ran first, a subroutine call before the first load: 0.012 ms a decode
    // step, sixteenth session), and a 16-bit output stored directly, other dtypes out of line
    const unsigned H = (unsigned)out.sh[1], S = (unsigned)out.sh[2], r32 = (unsigned)row;
    const i64 o = (i64)(r32 / (S * H)) * out.st[0] + (i64)(r32 / S % H) * out.st[1] + (i64)(r32 % S) * out.st[2] +
                  d * out.st[3];
    st16_or_cold(out.ptr, out.dt, o, L > 0.0f ? sum / L : 0.0f);
  }
}
#undef NPU_KBIT
#define NPU_KBIT 32

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
// The decode attention's prefetch: the block's K and V rows into L2 (16-bit caches with
// contiguous rows; up to max_bytes each), while the previous kernel (the cache write)
// finishes. Address arithmetic on the parameters only.
__device__ __forceinline__ void prefetch_l2_attn_rows(const TD& t, i64 split_len, u64 max_bytes) {
  if (threadIdx.x != 0 || !is16_dt(t.dt) || t.st[3] != 1 || t.st[2] != t.sh[3]) return;
  // 32-bit: a head count and a grid index (an i64 division is a ~80-instruction subroutine)
  const unsigned kvh = (unsigned)t.sh[1];
  i64 kh = blockIdx.y % kvh, b = blockIdx.y / kvh;
  i64 t0 = blockIdx.x * split_len, t1 = min(t.sh[2], t0 + split_len);
  if (t1 <= t0) return;
  const unsigned short* p = (const unsigned short*)t.ptr + b * t.st[0] + kh * t.st[1] + t0 * t.st[2];
  prefetch_l2_normal(p, min((u64)((t1 - t0) * t.st[2] * 2), max_bytes));
}

extern "C" __global__ void __launch_bounds__(128) k_attn_dec(TD q, TD k, TD v, TD mask, int has_mask, float scale,
                                                             int group, i64 split_len, int nsplit, float* part) {
  prefetch_l2_attn_rows(k, split_len, 65536);
  prefetch_l2_attn_rows(v, split_len, 65536);
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

// Decode attention on tensor cores for 16-bit caches (one query row, the group's <= 8 heads):
// grid (split, B * KVH), 4 warps. Where k_attn_dec keeps one key per lane and leaves most of
// the memory system idle at long contexts (ncu at 32000 keys: 15% of DRAM bandwidth, 70 us a
// layer), this kernel streams the block's key range in tiles of DM_KEYS keys, every warp
// taking 16 keys of a tile. The products are transposed, S^T = K Q^T and O^T = V^T P^T: the
// warp's 16 keys are the m16 rows and the group's heads the 8 columns, so no accumulator row
// idles (with the heads as rows, 10 of 16 idled in Qwen, and the accumulators needed twice the
// registers). A warp copies its own keys' K and V rows by cp.async into its own two stages
// while it computes the tile before (only it reads them), so the tile loop has no block
// barrier and the warps run their dependent chains out of step (H100, decode at 32000 of
// 32768: the attention 0.97 -> 0.81 ms a step against the untransposed, block-staged form).
// With a mask the block first reads its range's mask (16-byte loads, all in flight) and marks
// the tiles holding an attended slot: only those are copied (a cache of 32768 slots at
// position 2000 reads 2000 keys, not 32768). Masked slots get probability exactly 0 and their V
// rows are zeroed (a stale slot holding inf gives no NaN). The warps' states are merged through
// shared memory into one partial per head in k_attn_dec's format, merged over the splits by
// k_attn_combine. tools/mma-emu/attn_dec_mma_tile.py checks a warp's tile step off the GPU.
#define DM_KEYS 64
#define DM_MAXT 1024  // tiles per split whose live flags fit the block's bit set
#define DM_LD (MQ_MAXD + 8)  // shared row pitch in 16-bit elements (ldmatrix without bank conflicts)
// dynamic shared memory: each of the 4 warps' two stages of its 16 keys' K rows then V rows,
// then the live-tile bits
#define DM_WSTAGE_ELEMS (32 * DM_LD)
#define DM_WARP_ELEMS (2 * DM_WSTAGE_ELEMS)
#define DM_SMEM_BYTES (4 * DM_WARP_ELEMS * 2 + DM_MAXT / 8)

// The live-tile words of k_attn_dec_mma's split, each built by one warp (words warp, warp + 4,
// ...) from ballots over its 32 tiles' mask values and stored whole: no zeroing pass, no
// barrier before the scan, no shared atomics (the lanes' atomicOr into one word cost 24 shared
// wavefronts a warp instruction). `mp`: the split's first mask value where the mask is 16-bit
// with contiguous, 16-byte aligned keys (eight keys a 16-byte load), else null and `mask` read
// key by key out of line. Tiles past `nlist` in a word get no bit (their keys are past
// `nkeys`).
__device__ __forceinline__ void dm_live_words(unsigned* live, const unsigned short* mp, int mdt, const TD& mask,
                                              i64 mkey0, int has_mask, int nkeys, int nlist) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nwords = (nlist + 31) >> 5;
  for (int wd = warp; wd < nwords; wd += 4) {
    unsigned bits = 0u;
    const int k0 = wd * 32 * DM_KEYS;
    if (!has_mask) {
      const int n = nlist - wd * 32;
      bits = n >= 32 ? ~0u : (1u << n) - 1u;
    } else if (mp != nullptr) {
      // 256 keys a round: lane l's eight at l * 8, so lanes 8q .. 8q + 7 hold the round's tile q
      for (int r = 0; r < 8 && k0 + r * 256 < nkeys; ++r) {
        const int e = k0 + r * 256 + lane * 8;
        bool any = false;
        if (e < nkeys) {
          const uint4 u = *(const uint4*)(mp + e);
          const unsigned w4[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            any |= !(h16_to_f32(w4[j] & 0xffff, mdt) <= MASKED);
            any |= !(h16_to_f32(w4[j] >> 16, mdt) <= MASKED);
          }
        }
        const unsigned b = __ballot_sync(0xffffffffu, any);
#pragma unroll
        for (int q = 0; q < 4; ++q)
          if ((b >> (8 * q)) & 0xffu) bits |= 1u << (4 * r + q);
      }
    } else {
      // 32 keys a round, a key a lane: two rounds a tile
      for (int r = 0; r < 64 && k0 + r * 32 < nkeys; ++r) {
        const int e = k0 + r * 32 + lane;
        const bool any = e < nkeys && !(ld_dt_cold(mask.ptr, mask.dt, mkey0 + e * mask.st[3]) <= MASKED);
        if (__ballot_sync(0xffffffffu, any)) bits |= 1u << (r >> 1);
      }
    }
    if (lane == 0) live[wd] = bits;
  }
}

// The first live tile at or after `from` (tile count `n` when none).
__device__ __forceinline__ int dm_next_live(const unsigned* live, int from, int n) {
  for (int w = from >> 5; (w << 5) < n; ++w) {
    unsigned bits = live[w] & (w == (from >> 5) ? ~0u << (from & 31) : ~0u);
    if (bits) return min(n, (w << 5) + __ffs(bits) - 1);
  }
  return n;
}

// A warp's share of k_attn_dec_mma's staging: its 16 keys' K rows, then their V
// rows, into its own stage, one cp.async group; a lane's rows and column worked out once.
// Where D / 8 divides 32 and both caches' rows are contiguous and aligned, lane l copies the
// pieces at column (l % per) * 8 of rows l / per, + 32 / per, ...; otherwise element copies.
struct DwStage {
  const unsigned short *ks, *vs;  // key 0 of this (batch, KV head)
  i64 krs, vrs, T;  // row strides, keys
  u64 pol;
  int r0, rstep, c, fast;
};
__device__ __forceinline__ DwStage dw_stage_plan(const TD& k, i64 kbase, const TD& v, i64 vbase, int D) {
  DwStage p;
  const int per = D / 8, lane = threadIdx.x & 31;
  p.ks = (const unsigned short*)k.ptr + kbase;
  p.vs = (const unsigned short*)v.ptr + vbase;
  p.krs = k.st[2];
  p.vrs = v.st[2];
  p.T = k.sh[2];
  p.pol = l2_evict_first();
  p.fast = rows_vec16(k, kbase) && rows_vec16(v, vbase) && (32 % per) == 0;
  p.r0 = lane / per;
  p.rstep = 32 / per;
  p.c = (lane % per) * 8;
  return p;
}
// dw_stage's element copies, for caches whose rows 16-byte copies cannot take: out of line,
// so the fast path's code runs straight through. Scalars, not TDs
// (see ld_dt_cold).
__device__ __noinline__ void dw_stage_elems(const unsigned short* kp, i64 ks2, i64 ks3, const unsigned short* vp,
                                            i64 vs2, i64 vs3, i64 T, i64 t0, int D, unsigned short* dst) {
  const int per = D / 8;
  for (int idx = threadIdx.x & 31; idx < 32 * per; idx += 32) {
    const bool isv = idx >= 16 * per;
    const int e = isv ? idx - 16 * per : idx;
    const int row = e / per, c = (e % per) * 8;
    const i64 tt = t0 + row;
    const unsigned short* src = isv ? vp : kp;
    const i64 s2 = isv ? vs2 : ks2, s3 = isv ? vs3 : ks3;
    unsigned short* d = dst + ((isv ? 16 : 0) + row) * DM_LD + c;
#pragma unroll
    for (int i = 0; i < 8; ++i) d[i] = tt < T ? src[tt * s2 + (c + i) * s3] : 0;
  }
}

// Keys t0 .. t0 + 15 of K, then of V, into dst[0..15] and dst[16..31] (rows DM_LD apart;
// zeros past T); one commit group.
__device__ __forceinline__ void dw_stage(const DwStage& p, const TD& k, i64 kbase, const TD& v, i64 vbase, i64 t0,
                                         int D, unsigned short* dst) {
  if (p.fast) {
    // rows past T: a 0-byte source fills the 16 bytes with zeros
    for (int row = p.r0; row < 16; row += p.rstep) {
      const i64 tt = t0 + row;
      const i64 ts = min(tt, p.T - 1);
      cp_async16_hint(dst + row * DM_LD + p.c, p.ks + ts * p.krs + p.c, tt < p.T, p.pol);
      cp_async16_hint(dst + (16 + row) * DM_LD + p.c, p.vs + ts * p.vrs + p.c, tt < p.T, p.pol);
    }
  } else {
    dw_stage_elems(p.ks, k.st[2], k.st[3], p.vs, v.st[2], v.st[3], p.T, t0, D, dst);
  }
  cp_async_commit();
}

#undef NPU_KBIT
#define NPU_KBIT 4
template <bool BF>
__device__ __forceinline__ void attn_dec_mma_body(const TD& q, const TD& k, const TD& v, const TD& mask,
                                                  int has_mask, float scale, int group, i64 split_len,
                                                  int nsplit, float* part, unsigned char* dsm, const TD& pos,
                                                  int pre) {
  // per warp, two stages of its 16 keys' K rows then V rows: [4][2][2][16][DM_LD]
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  unsigned short* wst = (unsigned short*)dsm + warp * DM_WARP_ELEMS;
  unsigned* live = (unsigned*)((unsigned short*)dsm + 4 * DM_WARP_ELEMS);  // [DM_MAXT / 32]
  const int D = (int)q.sh[3], nkc = D / 16;
  const i64 H = q.sh[1], T = k.sh[2], KVH = k.sh[1];
  // 32-bit division: the i64 one is a subroutine call
  const i64 b = blockIdx.y / (unsigned)KVH, kh = blockIdx.y % (unsigned)KVH;
  const int split = blockIdx.x;
  const i64 t_begin = split * split_len, t_end = min(T, t_begin + split_len);
  const int ntile = t_end > t_begin ? (int)((t_end - t_begin + DM_KEYS - 1) / DM_KEYS) : 0;
  const i64 mbase = has_mask ? b * mask.st[0] + (kh * group) * mask.st[1] : 0;
  // Live tiles of the range (dm_live_words); the mask's fast path also serves the tile loop.
  const int nkeys = (int)(t_end - t_begin);
  // the planner keeps a split within DM_MAXT tiles
  const int nlist = min(ntile, DM_MAXT);
  const bool mvec = has_mask && is16_dt(mask.dt) && mask.st[3] == 1 && (mbase % 8) == 0 && (mask.ptr % 16) == 0 &&
                    (t_begin % 8) == 0 && (T % 8) == 0;
  const unsigned short* mp = mvec ? (const unsigned short*)mask.ptr + mbase + t_begin : nullptr;
  dm_live_words(live, mp, mask.dt, mask, mbase + t_begin * (has_mask ? mask.st[3] : 0), has_mask, nkeys, nlist);
  // O^T = V^T P^T: rows d = mt * 16 + g (+ 8), columns heads tq * 2 (+ 1)
  float acc[MQ_MAXD / 16][4];
#pragma unroll
  for (int mt = 0; mt < MQ_MAXD / 16; ++mt) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;
  // the online softmax's max and this lane's part of the sum, for heads tq * 2 and tq * 2 + 1
  float m2[2] = {-NPU_INF, -NPU_INF}, l2[2] = {0.0f, 0.0f};
  const i64 kbase = b * k.st[0] + kh * k.st[1], vbase = b * v.st[0] + kh * v.st[1];
  __syncthreads();  // live bits complete
  const DwStage plan = dw_stage_plan(k, kbase, v, vbase, D);
  int cur = dm_next_live(live, 0, nlist);
  if (cur < nlist) dw_stage(plan, k, kbase, v, vbase, t_begin + (i64)cur * DM_KEYS + warp * 16, D, wst);
  // With `pre`, everything above ran before the programmatic wait: the launch before this one
  // (the RoPE / cache group) writes only row `p` of K and V among what it read, and reads the
  // position without writing it (the planner's cache_written_before), so the position is read
  // before the wait too. After the wait, q and row p of the staged tile again, their loads in
  // flight together (one round trip; the position's load before them made two).
  const i64 p = !pre ? 0 : pos.dt == DT_I64 ? *(const long long*)pos.ptr : ldi_dt_cold(pos.ptr, pos.dt, 0);
  if (pre) pdl_wait();
  // Q^T of head g as B fragments (heads past the group zero): dims kc * 16 + tq * 2 (+ 1), + 8
  unsigned qb[MQ_MAXD / 16][2];
  const bool qrow = g < group;
  const i64 qoff = b * q.st[0] + (kh * group + (qrow ? g : 0)) * q.st[1];
#pragma unroll
  for (int kc = 0; kc < MQ_MAXD / 16; ++kc) {
    if (kc < nkc) {
      const int d = kc * 16 + tq * 2;
      qb[kc][0] = qrow ? ld_pair(q, qoff + d) : 0u;
      qb[kc][1] = qrow ? ld_pair(q, qoff + d + 8) : 0u;
    }
  }
  if (pre) {
    const i64 t0 = t_begin + (i64)cur * DM_KEYS;
    // only the warp whose 16 keys hold p
    const i64 w0 = t0 + warp * 16;
    if (cur < nlist && p >= w0 && p < w0 + 16 && p < T) {  // D % 16 == 0 (planner)
      cp_async_wait_n<0>();
      __syncwarp();
      const int per = D / 8, r = (int)(p - w0);
      for (int idx = lane; idx < 2 * per; idx += 32) {
        const bool isv = idx >= per;
        const TD& t = isv ? v : k;
        const i64 base = isv ? vbase : kbase;
        const int c = (idx % per) * 8;
        unsigned short* dst = wst + ((isv ? 16 : 0) + r) * DM_LD + c;
        const unsigned short* src = (const unsigned short*)t.ptr + base + p * t.st[2] + c * t.st[3];
#pragma unroll
        for (int i = 0; i < 8; ++i) dst[i] = src[i * t.st[3]];
      }
      __syncwarp();
    }
  }
  // ldmatrix addressing: lane l gives row l & 7 of 8x8 matrix l >> 3; kq: this lane's first
  // head of the scores and first key of the A fragments
  const int lrow = lane & 7, lmat = lane >> 3, kq = tq * 2;
  for (int it = 0; cur < nlist; ++it) {
    const int buf = it & 1;
    const int nxt = dm_next_live(live, cur + 1, nlist);
    const i64 t0 = t_begin + (i64)cur * DM_KEYS;
    // this lane's two keys of the warp's 16 (g, g + 8): mask values read before the wait
    float mv[2];
    bool ok[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const i64 t = t0 + warp * 16 + g + j * 8;
      ok[j] = t < t_end;
      mv[j] = !(has_mask && ok[j]) ? 0.0f
              : mvec                ? h16_to_f32(mp[t - t_begin], mask.dt)
                                    : ld_dt_cold(mask.ptr, mask.dt, mbase + t * mask.st[3]);
    }
    if (nxt < nlist) {
      dw_stage(plan, k, kbase, v, vbase, t_begin + (i64)nxt * DM_KEYS + warp * 16, D,
               wst + (buf ^ 1) * DM_WSTAGE_ELEMS);
      cp_async_wait_n<1>();  // this tile's group done, the next tile's in flight
    } else {
      cp_async_wait_n<0>();
    }
    __syncwarp();  // every lane's copies of this stage visible to the warp
    const unsigned short* ks = wst + buf * DM_WSTAGE_ELEMS;
    const unsigned short* vs = ks + 16 * DM_LD;
    // S^T = K Q^T over the warp's 16 keys (rows) and the group's heads (columns): K's A
    // fragments by ldmatrix (matrices: keys 0-7 / 8-15 at dims 0-7, then at dims 8-15 of the
    // step), two accumulators over alternate steps (half the dependent chain of mma)
    float sc[2][4];
#pragma unroll
    for (int a = 0; a < 2; ++a) sc[a][0] = sc[a][1] = sc[a][2] = sc[a][3] = 0.0f;
    const unsigned short* krow = ks + (lrow + (lmat & 1) * 8) * DM_LD + (lmat >> 1) * 8;
#pragma unroll
    for (int kc = 0; kc < MQ_MAXD / 16; ++kc) {
      if (kc < nkc) {
        unsigned ka[4];
        ldmatrix_x4(ka, krow + kc * 16);
        mma16816<BF>(sc[kc & 1], ka, qb[kc][0], qb[kc][1]);
      }
    }
    // s[i]: key g (i < 2) or g + 8, head tq * 2 + (i & 1)
#pragma unroll
    for (int j = 0; j < 2; ++j) ok[j] = ok[j] && !(mv[j] <= MASKED);
    float s[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) s[i] = ok[i >> 1] ? (sc[0][i] + sc[1][i]) * scale + mv[i >> 1] : -NPU_INF;
    // per head, the max over the warp's 16 keys: the lanes of one tq (g = lane >> 2)
    float mx[2] = {fmaxf(s[0], s[2]), fmaxf(s[1], s[3])};
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xffffffffu, mx[h2], 4));
      mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xffffffffu, mx[h2], 8));
      mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xffffffffu, mx[h2], 16));
    }
    float c[2];
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const float mn = fmaxf(m2[h2], mx[h2]);
      c[h2] = m2[h2] == -NPU_INF ? 0.0f : expf(m2[h2] - mn);
      m2[h2] = mn;
    }
    float p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = s[i] == -NPU_INF ? 0.0f : expf(s[i] - m2[i & 1]);
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) l2[h2] = l2[h2] * c[h2] + (p[h2] + p[h2 + 2]);
#pragma unroll
    for (int mt = 0; mt < MQ_MAXD / 16; ++mt) {
      acc[mt][0] *= c[0];
      acc[mt][1] *= c[1];
      acc[mt][2] *= c[0];
      acc[mt][3] *= c[1];
    }
    // P^T's B fragments (keys tq * 2 (+ 1), + 8, x head g): this lane's (keys g, g + 8 x heads
    // tq * 2 (+ 1)) transposed as two 8x8 matrices
    const unsigned pb0 = movmatrix_trans(pack_h2<BF>(p[0], p[1]));
    const unsigned pb1 = movmatrix_trans(pack_h2<BF>(p[2], p[3]));
    // masked keys' V rows zeroed (a stale slot may hold inf or NaN): key j's flag is bit 4 j
    // of the ballot over keys g (lo) or g + 8 (hi)
    const unsigned lo = __ballot_sync(0xffffffffu, ok[0]), hi = __ballot_sync(0xffffffffu, ok[1]);
    const unsigned za = ((lo >> (4 * kq)) & 1u ? 0xffffu : 0u) | ((lo >> (4 * kq + 4)) & 1u ? 0xffff0000u : 0u);
    const unsigned zb = ((hi >> (4 * kq)) & 1u ? 0xffffu : 0u) | ((hi >> (4 * kq + 4)) & 1u ? 0xffff0000u : 0u);
    // O^T += V^T P^T: V^T's A fragments by ldmatrix.trans (matrices: keys 0-7 at dims 0-7 and
    // 8-15 of the m tile, then keys 8-15 at the same)
    const unsigned short* vrow = vs + (lrow + (lmat >> 1) * 8) * DM_LD + (lmat & 1) * 8;
#pragma unroll
    for (int mt = 0; mt < MQ_MAXD / 16; ++mt) {
      if (mt < nkc) {
        unsigned va[4];
        ldmatrix_x4_trans(va, vrow + mt * 16);
        va[0] &= za;
        va[1] &= za;
        va[2] &= zb;
        va[3] &= zb;
        mma16816<BF>(acc[mt], va, pb0, pb1);
      }
    }
    __syncwarp();  // the warp is done with this stage before it refills it
    cur = nxt;
  }
  __syncthreads();  // every warp is done with its stages: the merge below reuses their space
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    l2[h2] += __shfl_xor_sync(0xffffffffu, l2[h2], 4);
    l2[h2] += __shfl_xor_sync(0xffffffffu, l2[h2], 8);
    l2[h2] += __shfl_xor_sync(0xffffffffu, l2[h2], 16);
  }
  // Merge the four warps' states (the stages' space is free now): per warp and head m, l and
  // acc[D]; then thread (g, d) pairs sum them under the block maximum.
  float* xm = (float*)dsm;  // [4][8] m
  float* xl = xm + 32;  // [4][8] l
  float* xa = xl + 32;  // [4][8][MQ_MAXD] acc
  if (g == 0) {
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      xm[warp * 8 + kq + h2] = m2[h2];
      xl[warp * 8 + kq + h2] = l2[h2];
    }
  }
#pragma unroll
  for (int mt = 0; mt < MQ_MAXD / 16; ++mt) {
    if (mt < nkc) {
      float* a = xa + (warp * 8 + kq) * MQ_MAXD + mt * 16 + g;
      a[0] = acc[mt][0];
      a[MQ_MAXD] = acc[mt][1];
      a[8] = acc[mt][2];
      a[MQ_MAXD + 8] = acc[mt][3];
    }
  }
  __syncthreads();
  // per head, its four warps' weights once; a thread's dims d = tid, tid + 128, ... (no
  // division per element)
  for (int hg = 0; hg < group; ++hg) {
    float M = -NPU_INF;
#pragma unroll
    for (int w = 0; w < 4; ++w) M = fmaxf(M, xm[w * 8 + hg]);
    float wt[4], L = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float mw = xm[w * 8 + hg];
      wt[w] = mw == -NPU_INF ? 0.0f : expf(mw - M);
      L += xl[w * 8 + hg] * wt[w];
    }
    float* pp = part + ((b * H + kh * group + hg) * nsplit + split) * (i64)(D + 2);
    if (tid == 0) {
      pp[0] = M;
      pp[1] = L;
    }
    for (int d = tid; d < D; d += blockDim.x) {
      float A = 0.0f;
#pragma unroll
      for (int w = 0; w < 4; ++w) A += xa[(w * 8 + hg) * MQ_MAXD + d] * wt[w];
      pp[2 + d] = A;
    }
  }
}

// k_attn_dec_mma's pre-wait prefetch, bytes per operand: one 64-key tile of 128 dims. 64 KB
// (the whole split at 32000 of 32768: 33 MB a layer) cost 0.044 ms a step there and nothing
// at 2048 slots, where a split is one tile (Qwen2.5-1.5B decode, H200, exp-pf A/B of the
// seventeenth session: 1.9108 -> 1.8664 ms at 32000; no prefetch 1.8655, but +0.003 at 1000).
#define DEC_MMA_PF_BYTES 16384
// At least three blocks an SM, as its shared memory allows (138 registers, no spills).
// pdl_wait, not pdl_enter: the combine after it is scheduled as its blocks exit, not beside
// them (Qwen2.5-1.5B decode on an H200, exp-atrig: 1.8220 -> 1.7772 ms a step at 32000 of
// 32768, -0.001 / -0.002 at 1000 / 128). Measured, not explained: triggering after the tile
// loop instead gained nothing at 32000 (+0.001; -0.003 / -0.007), so what the early combine
// blocks cost is not the tile loop's time.
extern "C" __global__ void __launch_bounds__(128, 3) k_attn_dec_mma(TD q, TD k, TD v, TD mask, int has_mask,
                                                                 float scale, int group, i64 split_len,
                                                                 int nsplit, float* part, TD pos, int pre) {
  prefetch_l2_attn_rows(k, split_len, DEC_MMA_PF_BYTES);
  prefetch_l2_attn_rows(v, split_len, DEC_MMA_PF_BYTES);
  NPU_TL_TOP();
  if (!pre) pdl_wait();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(16) unsigned char dm_smem[];
  if (q.dt == DT_BF16) {
    attn_dec_mma_body<true>(q, k, v, mask, has_mask, scale, group, split_len, nsplit, part, dm_smem, pos, pre);
  } else {
    attn_dec_mma_body<false>(q, k, v, mask, has_mask, scale, group, split_len, nsplit, part, dm_smem, pos, pre);
  }
#endif
}
#undef NPU_KBIT
#define NPU_KBIT 32
