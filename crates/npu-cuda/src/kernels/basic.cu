// Data-movement and normalization kernels: copy, fill, embedding, index_copy, rope,
// softmax, rms_norm, layer_norm, reduce, pooling. Grid-stride loops; one block per row for
// the row reductions.

extern "C" __global__ void k_copy(TD x, TD out, i64 n) {
  pdl_enter();
  bool ints = !is_float_dt(x.dt) && !is_float_dt(out.dt);
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    i64 si = offset_of(x, i), di = offset_of(out, i);
    if (ints) sti_dt(out.ptr, out.dt, di, ldi_dt(x.ptr, x.dt, si));
    else st(out, di, ld(x, si));
  }
}

extern "C" __global__ void k_fill(TD out, double v, i64 n) {
  pdl_enter();
  bool fl = is_float_dt(out.dt);
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    i64 di = offset_of(out, i);
    if (fl) st(out, di, (float)v);
    else sti_dt(out.ptr, out.dt, di, (i64)v);
  }
}

// out[i, :] = table[ids[i], :]; an id out of range reports and leaves the row alone.
extern "C" __global__ void k_embedding(TD table, TD ids, TD out, i64 nids, int* err, int step) {
  pdl_enter();
  i64 d = table.sh[1];
  int r = out.rank;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < nids * d; e += (i64)gridDim.x * blockDim.x) {
    i64 i = e / d, j = e % d;
    i64 id = ldi_dt(ids.ptr, ids.dt, offset_of(ids, i));
    if (id < 0 || id >= table.sh[0]) { report(err, step); continue; }
    float v = ld(table, id * table.st[0] + j * table.st[1]);
    st(out, offset_lead(out, r - 1, i) + j * out.st[r - 1], v);
  }
}

// Element e of src (in src's row-major order) goes to dest[.., index[i], ..] along `axis`:
// its src and dest offsets, or false when its index is out of range.
__device__ __forceinline__ bool index_copy_at(const TD& index, const TD& src, const TD& dest, int axis, i64 e,
                                              i64* so, i64* dof) {
  i64 lin = e;
  bool ok = true;
  *so = 0;
  *dof = 0;
  for (int d = src.rank - 1; d >= 0; --d) {
    i64 ix = imod(lin, src.sh[d]);
    lin = idiv(lin, src.sh[d]);
    *so += ix * src.st[d];
    i64 di = ix;
    if (d == axis) {
      di = ldi_dt(index.ptr, index.dt, offset_of(index, ix));
      if (di < 0 || di >= dest.sh[d]) ok = false;
    }
    *dof += di * dest.st[d];
  }
  return ok;
}

// DT as in dt_of: src and dest both of dtype DT where DT >= 0.
template <int DT>
__device__ __forceinline__ void index_copy_elem(const TD& index, const TD& src, const TD& dest, int axis, i64 e,
                                                int* err, int step) {
  i64 so, dof;
  if (!index_copy_at(index, src, dest, axis, e, &so, &dof)) {
    report(err, step);
    return;
  }
  const int sd = dt_of<DT>(src), dd = dt_of<DT>(dest);
  if (!is_float_dt(sd) && !is_float_dt(dd)) sti_dt(dest.ptr, dd, dof, ldi_dt(src.ptr, sd, so));
  else st_dt(dest.ptr, dd, dof, ld_dt(src.ptr, sd, so));
}

// dest[.., index[i], ..] = src[.., i, ..] along `axis`.
extern "C" __global__ void k_index_copy(TD index, TD src, TD dest, int axis, i64 n, int* err, int step) {
  pdl_enter();
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < n; e += (i64)gridDim.x * blockDim.x)
    index_copy_elem<-1>(index, src, dest, axis, e, err, step);
}

// Element e of rotate-half RoPE, x * cos + rotate_half(x) * sin, stored at out's element e;
// returns the stored (rounded) value. DT as in dt_of: x, c, s and out of dtype DT where DT >= 0.
template <int DT>
__device__ __forceinline__ float rope_elem(const TD& x, const TD& c, const TD& s, const TD& out, i64 e) {
  int r = x.rank;
  i64 d = x.sh[r - 1], h = d / 2;
  i64 row = idiv(e, d), i = e - row * d;
  i64 xo = offset_lead(x, r - 1, row);
  const int xd = dt_of<DT>(x);
  float xv = ld_dt(x.ptr, xd, xo + i * x.st[r - 1]);
  float rot = i < h ? -ld_dt(x.ptr, xd, xo + (i + h) * x.st[r - 1]) : ld_dt(x.ptr, xd, xo + (i - h) * x.st[r - 1]);
  float cv = ld_dt(c.ptr, dt_of<DT>(c), offset_lead(c, r - 1, row) + i * c.st[r - 1]);
  float sv = ld_dt(s.ptr, dt_of<DT>(s), offset_lead(s, r - 1, row) + i * s.st[r - 1]);
  const int od = dt_of<DT>(out);
  float v = round_dt(od, rope_mix(xv, cv, rot, sv));
  st_dt(out.ptr, od, offset_lead(out, r - 1, row) + i * out.st[r - 1], v);
  return v;
}

extern "C" __global__ void k_rope(TD x, TD c, TD s, TD out, i64 n) {
  pdl_enter();
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < n; e += (i64)gridDim.x * blockDim.x)
    rope_elem<-1>(x, c, s, out, e);
}

// One attention layer's RoPE and KV-cache steps in one launch (plan/rope_cache.rs picks the
// steps and states when this equals running them in order):
//   part 0, n0 elements: out0 = rope(x0, c0, s0)                    (the queries)
//   part 1, n1 elements: out1 = rope(x1, c1, s1) and, if scatter1,
//                        dest1[.., idx1[i], ..] = out1[.., i, ..]     (the keys, into the cache)
//   part 2, n2 elements: dest2[.., idx2[i], ..] = src2[.., i, ..]    (the values, into the cache)
// The cache gets the rounded value out1 holds, as an index_copy reading out1 back would. An
// index out of range reports step1 (the keys' index_copy) or step2 (the values').
// Instances: k_rope_cache[8] reads every dtype at run time, k_rope_cache[8]_bf16 / _f16 take
// every operand but the indices in that dtype (the planner checks).
// The kernels' parameters (T: TD) and their bodies' (T: const TD&, which keeps the descriptors
// in parameter space: taken by value, the instanced bodies copied them to local memory).
#define ROPE_CACHE_PARAMS_T(T)                                                                          \
  T x0, T c0, T s0, T out0, i64 n0, T x1, T c1, T s1, T out1, i64 n1, int scatter1, T idx1, T dest1, int axis1, \
      T idx2, T src2, T dest2, int axis2, i64 n2, int *err, int step1, int step2
#define ROPE_CACHE_PARAMS ROPE_CACHE_PARAMS_T(TD)
#define ROPE_CACHE_ARGS \
  x0, c0, s0, out0, n0, x1, c1, s1, out1, n1, scatter1, idx1, dest1, axis1, idx2, src2, dest2, axis2, n2, err, step1, step2

// Item `item`'s row and first element i (rope_pair8's walk over (rows, h / 8) of x).
__device__ __forceinline__ void rope_item(const TD& x, i64 item, i64* row, i64* i) {
  const i64 per = x.sh[x.rank - 1] / 16;
  *row = idiv(item, per);
  *i = (item - *row * per) * 8;
}

// The rotation of 8 elements i .. i+7 of a row's first half and their partners h further,
// on raw 16-bit rows (x, c, s at xp, cp, sp; out at op), 16-byte loads all issued before use;
// stores both chunks, lo/hi get the stored values. xd .. od: the operands' dtype codes.
__device__ __forceinline__ void rope8_rows(const unsigned short* xp, const unsigned short* cp,
                                           const unsigned short* sp, u64 op, i64 h, int xd, int cd, int sd,
                                           int od, float* lo, float* hi) {
  const uint4 u[6] = {*(const uint4*)xp, *(const uint4*)(xp + h), *(const uint4*)cp,
                      *(const uint4*)(cp + h), *(const uint4*)sp, *(const uint4*)(sp + h)};
  float xl[8], xh[8], cl[8], ch[8], sl[8], sh[8];
  unpack8(u[0], xd, xl);
  unpack8(u[1], xd, xh);
  unpack8(u[2], cd, cl);
  unpack8(u[3], cd, ch);
  unpack8(u[4], sd, sl);
  unpack8(u[5], sd, sh);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    lo[j] = round_dt(od, rope_mix(xl[j], cl[j], -xh[j], sl[j]));
    hi[j] = round_dt(od, rope_mix(xh[j], ch[j], xl[j], sh[j]));
  }
  st8(op, od, 0, lo);
  st8(op + 2 * (u64)h, od, 0, hi);
}

// rope_elem for 8 elements i .. i+7 of a row's first half and their partners i+h ..: item
// `item` of the row-major walk over (rows, h / 8), 16-byte loads all issued before use. Needs
// 16-bit x, c, s and out with contiguous, 16-byte aligned rows and d % 16 == 0 (the planner
// checks). Stores both chunks; lo/hi get the stored values, *k the flat index of lo[0].
template <int DT>
__device__ __forceinline__ void rope_pair8(const TD& x, const TD& c, const TD& s, const TD& out, i64 item, float* lo,
                                           float* hi, i64* k) {
  const int r = x.rank;
  const i64 d = x.sh[r - 1], h = d / 2;
  i64 row, i;
  rope_item(x, item, &row, &i);
  const unsigned short* xp = (const unsigned short*)x.ptr + offset_lead(x, r - 1, row) + i;
  const unsigned short* cp = (const unsigned short*)c.ptr + offset_lead(c, r - 1, row) + i;
  const unsigned short* sp = (const unsigned short*)s.ptr + offset_lead(s, r - 1, row) + i;
  const u64 op = out.ptr + 2 * (u64)(offset_lead(out, r - 1, row) + i);
  rope8_rows(xp, cp, sp, op, h, dt_of<DT>(x), dt_of<DT>(c), dt_of<DT>(s), dt_of<DT>(out), lo, hi);
  *k = row * d + i;
}

// Eight consecutive elements of an index_copy along a dim other than the last, 16-byte rows
// on both sides in one dtype: a raw 16-byte copy. The source is loaded whatever the index
// holds (index_copy_at computes its offset without the index, in bounds), so the two loads
// are in flight together rather than one after the other.
__device__ __forceinline__ void index_copy8(const TD& index, const TD& src, const TD& dest, int axis, i64 e, int* err,
                                            int step) {
  i64 so, dof;
  const bool ok = index_copy_at(index, src, dest, axis, e, &so, &dof);
  const uint4 val = *(const uint4*)((const unsigned short*)src.ptr + so);
  if (!ok) {
    report(err, step);
    return;
  }
  *(uint4*)((unsigned short*)dest.ptr + dof) = val;
}

// k_rope_cache over vector items (the planner checks rope_pair8's and index_copy8's layouts
// for every part): 16 rotated elements for parts 0 and 1, 8 copied for part 2; the cache gets
// the keys as eight-element stores of the rounded values. A kernel of its own: with this path
// as a branch of k_rope_cache, its one-element walk (a decode step's) ran 11.0 -> 14.8 us.
template <int DT>
__device__ __forceinline__ void rope_cache8_body(ROPE_CACHE_PARAMS_T(const TD&)) {
  const i64 a0 = n0 / 16, a1 = n1 / 16, items = a0 + a1 + n2 / 8;
  for (i64 it = blockIdx.x * (i64)blockDim.x + threadIdx.x; it < items; it += (i64)gridDim.x * blockDim.x) {
    float lo[8], hi[8];
    i64 k;
    if (it < a0) {
      rope_pair8<DT>(x0, c0, s0, out0, it, lo, hi, &k);
    } else if (it < a0 + a1) {
      // the cache rows' index read first, in flight with the rotation's loads
      const i64 d1 = x1.sh[x1.rank - 1], h = d1 / 2;
      i64 row, i;
      rope_item(x1, it - a0, &row, &i);
      const i64 k0 = row * d1 + i;
      i64 so, dlo = 0, dhi = 0;
      const bool oklo = scatter1 && index_copy_at(idx1, out1, dest1, axis1, k0, &so, &dlo);
      const bool okhi = scatter1 && index_copy_at(idx1, out1, dest1, axis1, k0 + h, &so, &dhi);
      rope_pair8<DT>(x1, c1, s1, out1, it - a0, lo, hi, &k);
      if (!scatter1) continue;
      const int dd = dt_of<DT>(dest1);
      if (oklo) st8(dest1.ptr + 2 * (u64)dlo, dd, 0, lo);
      else report(err, step1);
      if (okhi) st8(dest1.ptr + 2 * (u64)dhi, dd, 0, hi);
      else report(err, step1);
    } else {
      index_copy8(idx2, src2, dest2, axis2, (it - a0 - a1) * 8, err, step2);
    }
  }
}
extern "C" __global__ void k_rope_cache8(ROPE_CACHE_PARAMS) { pdl_enter(); rope_cache8_body<-1>(ROPE_CACHE_ARGS); }
extern "C" __global__ void k_rope_cache8_bf16(ROPE_CACHE_PARAMS) { pdl_enter(); rope_cache8_body<DT_BF16>(ROPE_CACHE_ARGS); }
extern "C" __global__ void k_rope_cache8_f16(ROPE_CACHE_PARAMS) { pdl_enter(); rope_cache8_body<DT_F16>(ROPE_CACHE_ARGS); }

// A decode step's RoPE / cache group, one cache position (plan/rope_cache.rs, `Planner::rope_cache_dec`):
// every operand flattened by the planner to rows of d contiguous, 16-byte aligned 16-bit
// elements a row stride apart (0: one row for all, the tables broadcast over the heads), a
// cache row at row * stride + pos * pos_stride with pos read from a one-element index. Items
// as k_rope_cache8's. No descriptor walks and no dtype switches on the executed path: the
// generic kernel's walks ran ~360 instructions a warp, ~7 us a launch under ncu for a
// decode step's 2,048 elements. `dt`: the dtype where DT < 0.
#define ROPE_DEC_PARAMS                                                                                          \
  const unsigned short *x0, i64 xs0, const unsigned short *c0, i64 cs0, const unsigned short *s0, i64 ss0,      \
      unsigned short *o0, i64 os0, int rows0, const unsigned short *x1, i64 xs1, const unsigned short *c1,      \
      i64 cs1, const unsigned short *s1, i64 ss1, unsigned short *o1, i64 os1, int rows1, unsigned short *kc,   \
      i64 kcs, i64 kcp, const unsigned short *v, i64 vs, unsigned short *vc, i64 vcs, i64 vcp, int rows2,       \
      const void *pos, int pos64, i64 T, int d, int dt, int *err, int step1, int step2
#define ROPE_DEC_ARGS                                                                                         \
  x0, xs0, c0, cs0, s0, ss0, o0, os0, rows0, x1, xs1, c1, cs1, s1, ss1, o1, os1, rows1, kc, kcs, kcp, v, vs, vc, \
      vcs, vcp, rows2, pos, pos64, T, d, dt, err, step1, step2
// The one-element position index of k_rope_cache_dec (int64 or int32).
__device__ __forceinline__ i64 ld_index0(const void* p, int is64) {
  return is64 ? *(const long long*)p : (i64) * (const int*)p;
}
template <int DT>
__device__ __forceinline__ void rope_dec_body(ROPE_DEC_PARAMS) {
  const int per = d >> 4, a0 = rows0 * per, a1 = rows1 * per;
  const int it = blockIdx.x * blockDim.x + threadIdx.x;
  if (it >= a0 + a1 + rows2 * (d >> 3)) return;
  const int od = DT >= 0 ? DT : dt;
  if (it < a0 + a1) {
    const bool kp = it >= a0;
    const int j = kp ? it - a0 : it, row = j / per, i = (j - row * per) * 8;
    const unsigned short* x = (kp ? x1 + row * xs1 : x0 + row * xs0) + i;
    const unsigned short* c = (kp ? c1 + row * cs1 : c0 + row * cs0) + i;
    const unsigned short* s = (kp ? s1 + row * ss1 : s0 + row * ss0) + i;
    unsigned short* o = (kp ? o1 + row * os1 : o0 + row * os0) + i;
    // the keys' cache row: the index read before the rotation's loads are used
    const i64 p = kp ? ld_index0(pos, pos64) : 0;
    float lo[8], hi[8];
    rope8_rows(x, c, s, (u64)o, d >> 1, od, od, od, od, lo, hi);
    if (!kp) return;
    if (p < 0 || p >= T) {
      report(err, step1);
      return;
    }
    unsigned short* kd = kc + row * kcs + p * kcp + i;
    st8((u64)kd, od, 0, lo);
    st8((u64)(kd + (d >> 1)), od, 0, hi);
  } else {
    const int j = it - a0 - a1, per8 = d >> 3, row = j / per8, i = (j - row * per8) * 8;
    const i64 p = ld_index0(pos, pos64);
    const uint4 val = *(const uint4*)(v + row * vs + i);
    if (p < 0 || p >= T) {
      report(err, step2);
      return;
    }
    *(uint4*)(vc + row * vcs + p * vcp + i) = val;
  }
}
extern "C" __global__ void k_rope_cache_dec(ROPE_DEC_PARAMS) { pdl_enter(); rope_dec_body<-1>(ROPE_DEC_ARGS); }
extern "C" __global__ void k_rope_cache_dec_bf16(ROPE_DEC_PARAMS) { pdl_enter(); rope_dec_body<DT_BF16>(ROPE_DEC_ARGS); }
extern "C" __global__ void k_rope_cache_dec_f16(ROPE_DEC_PARAMS) { pdl_enter(); rope_dec_body<DT_F16>(ROPE_DEC_ARGS); }

template <int DT>
__device__ __forceinline__ void rope_cache_body(ROPE_CACHE_PARAMS_T(const TD&)) {
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < n0 + n1 + n2; e += (i64)gridDim.x * blockDim.x) {
    if (e < n0) {
      rope_elem<DT>(x0, c0, s0, out0, e);
    } else if (e < n0 + n1) {
      i64 k = e - n0;
      float v = rope_elem<DT>(x1, c1, s1, out1, k);
      i64 so, dof;
      if (!scatter1) continue;
      if (index_copy_at(idx1, out1, dest1, axis1, k, &so, &dof)) st_dt(dest1.ptr, dt_of<DT>(dest1), dof, v);
      else report(err, step1);
    } else {
      index_copy_elem<DT>(idx2, src2, dest2, axis2, e - n0 - n1, err, step2);
    }
  }
}
extern "C" __global__ void k_rope_cache(ROPE_CACHE_PARAMS) { pdl_enter(); rope_cache_body<-1>(ROPE_CACHE_ARGS); }
extern "C" __global__ void k_rope_cache_bf16(ROPE_CACHE_PARAMS) { pdl_enter(); rope_cache_body<DT_BF16>(ROPE_CACHE_ARGS); }
extern "C" __global__ void k_rope_cache_f16(ROPE_CACHE_PARAMS) { pdl_enter(); rope_cache_body<DT_F16>(ROPE_CACHE_ARGS); }

// One block per row of the last dim.
extern "C" __global__ void k_softmax(TD x, TD mask, int has_mask, float scale, TD out) {
  pdl_enter();
  int r = x.rank;
  i64 d = x.sh[r - 1], row = blockIdx.x;
  i64 xo = offset_lead(x, r - 1, row), oo = offset_lead(out, r - 1, row);
  i64 mo = has_mask ? offset_lead(mask, r - 1, row) : 0;
  float m = -NPU_INF;
  for (i64 i = threadIdx.x; i < d; i += blockDim.x) {
    float v = ld(x, xo + i * x.st[r - 1]) * scale;
    if (has_mask) v += ld(mask, mo + i * mask.st[r - 1]);
    m = fmaxf(m, v);
  }
  m = block_max(m);
  float sum = 0.0f;
  if (m != -NPU_INF) {
    for (i64 i = threadIdx.x; i < d; i += blockDim.x) {
      float v = ld(x, xo + i * x.st[r - 1]) * scale;
      if (has_mask) v += ld(mask, mo + i * mask.st[r - 1]);
      sum += expf(v - m);
    }
  }
  sum = block_sum(sum);
  float inv = 1.0f / sum;
  for (i64 i = threadIdx.x; i < d; i += blockDim.x) {
    // A fully masked row (every entry -inf) is NaN, as ATen's softmax (attention keeps zeros).
    float p = __int_as_float(0x7fc00000);
    if (m != -NPU_INF) {
      float v = ld(x, xo + i * x.st[r - 1]) * scale;
      if (has_mask) v += ld(mask, mo + i * mask.st[r - 1]);
      p = expf(v - m) * inv;
    }
    st(out, oo + i * out.st[r - 1], p);
  }
}

// out = round(x * rsqrt(mean(x^2) + eps)) * w; one block per row.
// One block per row. Rows of up to RN_MAX * blockDim elements are read once into registers
// (every load issued before the first use: one memory latency, not one per element); longer
// rows take a second pass over x.
#define RN_MAX 8
// The 16-byte path: 16-bit x, w and out, each contiguous along the row and 16-byte aligned,
// d % 8 == 0 and at most RN8 chunks of 8 per thread. Every load of the row and the weight is
// issued before any is used: through ld()'s dtype switch each waited for the one before (ncu:
// 12.2 us for a 1536-wide row of a 128-token prefill, 55 launches a run).
#define RN8 4
__device__ __forceinline__ bool rms_rows16(const TD& x, const TD& w, const TD& out, i64 d, i64 xo, i64 oo, int nt) {
  return is16_dt(x.dt) && is16_dt(w.dt) && is16_dt(out.dt) && x.st[x.rank - 1] == 1 && w.st[w.rank - 1] == 1 &&
         out.st[out.rank - 1] == 1 && (d % 8) == 0 && d / 8 <= (i64)RN8 * nt && (xo % 8) == 0 && (oo % 8) == 0 &&
         (x.ptr % 16) == 0 && (w.ptr % 16) == 0 && (out.ptr % 16) == 0;
}

// DT as in dt_of: x, w and out of dtype DT where DT >= 0.
template <int DT>
__device__ __forceinline__ void rms_norm_body(const TD& x, const TD& w, float eps, const TD& out) {
  int r = x.rank;
  i64 d = x.sh[r - 1], row = blockIdx.x;
  i64 xo = offset_lead(x, r - 1, row), oo = offset_lead(out, r - 1, row);
  i64 xs = x.st[r - 1], ws = w.st[w.rank - 1], os = out.st[r - 1];
  int nt = blockDim.x, t = threadIdx.x;
  const int xd = dt_of<DT>(x), wd = dt_of<DT>(w), od = dt_of<DT>(out);
  if (rms_rows16(x, w, out, d, xo, oo, nt)) {
    const int c8 = (int)(d / 8);
    const uint4* xp = (const uint4*)((const unsigned short*)x.ptr + xo);
    const uint4* wp = (const uint4*)w.ptr;
    uint4 xr[RN8], wr[RN8];
#pragma unroll
    for (int j = 0; j < RN8; ++j) {
      const int c = min(t + j * nt, c8 - 1);
      xr[j] = xp[c];
      wr[j] = wp[c];
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < RN8; ++j) {
      if (t + j * nt < c8) {
        float v[8];
        unpack8(xr[j], xd, v);
#pragma unroll
        for (int i = 0; i < 8; ++i) ss += v[i] * v[i];
      }
    }
    ss = block_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)d + eps);
    const u64 op = out.ptr + 2 * (u64)oo;
#pragma unroll
    for (int j = 0; j < RN8; ++j) {
      const int c = t + j * nt;
      if (c < c8) {
        float v[8], wv[8], y[8];
        unpack8(xr[j], xd, v);
        unpack8(wr[j], wd, wv);
#pragma unroll
        for (int i = 0; i < 8; ++i) y[i] = round_dt(od, v[i] * inv) * wv[i];
        st8(op, od, c, y);
      }
    }
    return;
  }
  bool regs = d <= (i64)RN_MAX * nt;
  float xv[RN_MAX], wv[RN_MAX];
  float ss = 0.0f;
  if (regs) {
#pragma unroll
    for (int j = 0; j < RN_MAX; ++j) {
      i64 i = t + (i64)j * nt;
      xv[j] = i < d ? ld_dt(x.ptr, xd, xo + i * xs) : 0.0f;
      wv[j] = i < d ? ld_dt(w.ptr, wd, i * ws) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < RN_MAX; ++j) ss += xv[j] * xv[j];
  } else {
    for (i64 i = t; i < d; i += nt) {
      float v = ld_dt(x.ptr, xd, xo + i * xs);
      ss += v * v;
    }
  }
  ss = block_sum(ss);
  float inv = 1.0f / sqrtf(ss / (float)d + eps);
  if (regs) {
#pragma unroll
    for (int j = 0; j < RN_MAX; ++j) {
      i64 i = t + (i64)j * nt;
      if (i < d) st_dt(out.ptr, od, oo + i * os, round_dt(od, xv[j] * inv) * wv[j]);
    }
  } else {
    for (i64 i = t; i < d; i += nt) {
      float v = ld_dt(x.ptr, xd, xo + i * xs);
      st_dt(out.ptr, od, oo + i * os, round_dt(od, v * inv) * ld_dt(w.ptr, wd, i * ws));
    }
  }
}
extern "C" __global__ void k_rms_norm(TD x, TD w, float eps, TD out) { pdl_enter(); rms_norm_body<-1>(x, w, eps, out); }
extern "C" __global__ void k_rms_norm_bf16(TD x, TD w, float eps, TD out) { pdl_enter(); rms_norm_body<DT_BF16>(x, w, eps, out); }
extern "C" __global__ void k_rms_norm_f16(TD x, TD w, float eps, TD out) { pdl_enter(); rms_norm_body<DT_F16>(x, w, eps, out); }

extern "C" __global__ void k_layer_norm(TD x, TD w, TD b, int hw, int hb, float eps, TD out) {
  pdl_enter();
  int r = x.rank;
  i64 d = x.sh[r - 1], row = blockIdx.x;
  i64 xo = offset_lead(x, r - 1, row), oo = offset_lead(out, r - 1, row);
  float s = 0.0f;
  for (i64 i = threadIdx.x; i < d; i += blockDim.x) s += ld(x, xo + i * x.st[r - 1]);
  float mean = block_sum(s) / (float)d;
  float v2 = 0.0f;
  for (i64 i = threadIdx.x; i < d; i += blockDim.x) {
    float t = ld(x, xo + i * x.st[r - 1]) - mean;
    v2 += t * t;
  }
  float inv = 1.0f / sqrtf(block_sum(v2) / (float)d + eps);
  for (i64 i = threadIdx.x; i < d; i += blockDim.x) {
    float v = (ld(x, xo + i * x.st[r - 1]) - mean) * inv;
    if (hw) v *= ld(w, i * w.st[w.rank - 1]);
    if (hb) v += ld(b, i * b.st[b.rank - 1]);
    st(out, oo + i * out.st[r - 1], v);
  }
}

// Reduces the trailing `reduced` dims; one block per leading element.
extern "C" __global__ void k_reduce(TD x, int reduced, int mean, TD out) {
  pdl_enter();
  int lead = x.rank - reduced;
  i64 n = 1;
  for (int d = lead; d < x.rank; ++d) n *= x.sh[d];
  i64 row = blockIdx.x;
  i64 base = offset_lead(x, lead, row);
  float s = 0.0f;
  for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
    i64 lin = i, off = 0;
    for (int d = x.rank - 1; d >= lead; --d) {
      off += (lin % x.sh[d]) * x.st[d];
      lin /= x.sh[d];
    }
    s += ld(x, base + off);
  }
  s = block_sum(s);
  if (threadIdx.x == 0) st(out, offset_of(out, row), mean ? s / (float)(n > 0 ? n : 1) : s);
}

// Max pooling with a 3x3 window, dilation 1, 16-bit x and out of one dtype, fewer than 2^31
// outputs (the ResNet stem's pooling; k_pool2d's 64-bit index math and loads behind ld()'s
// dtype switch ran at a fifteenth of the copy bandwidth at batch 64): 32-bit index math, the
// nine raw loads in flight together, out-of-range taps left out. NaN propagates as in
// k_pool2d (and ATen).
extern "C" __global__ void k_max_pool3_16(TD x, TD out, int sh, int sw, int ph, int pw, int cl) {
  pdl_enter();
  unsigned C = (unsigned)out.sh[1], OH = (unsigned)out.sh[2], OW = (unsigned)out.sh[3];
  int H = (int)x.sh[2], W = (int)x.sh[3];
  unsigned total = (unsigned)out.sh[0] * C * OH * OW;
  const unsigned short* xp = (const unsigned short*)x.ptr;
  unsigned short* op = (unsigned short*)out.ptr;
  for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    unsigned n, c, oy, ox;
    split_nchw<unsigned>(e, C, OH, OW, cl, n, c, oy, ox);
    i64 xb = n * x.st[0] + c * x.st[1];
    int hs = (int)oy * sh - ph, ws = (int)ox * sw - pw;
    unsigned short raw[9];
    bool in[9];
#pragma unroll
    for (int i = 0; i < 3; ++i) {
#pragma unroll
      for (int j = 0; j < 3; ++j) {
        int yy = hs + i, xx = ws + j;
        in[i * 3 + j] = yy >= 0 && yy < H && xx >= 0 && xx < W;
        int yc = min(max(yy, 0), H - 1), xc = min(max(xx, 0), W - 1);
        raw[i * 3 + j] = xp[xb + yc * x.st[2] + xc * x.st[3]];
      }
    }
    float m = -NPU_INF;
#pragma unroll
    for (int q = 0; q < 9; ++q) {
      float v = h16_to_f32(raw[q], x.dt);
      if (in[q] && (v > m || v != v)) m = v;
    }
    op[n * out.st[0] + c * out.st[1] + oy * out.st[2] + ox * out.st[3]] =
        x.dt == DT_BF16 ? f32_to_bf16(m) : f32_to_f16(m);
  }
}

// k_max_pool3_16 over a channels-last input and output, eight channels per thread: nine
// 16-byte loads and one 16-byte store (C % 8 == 0 and 16-byte aligned channel runs; the
// planner checks). NaN propagates per channel as in k_max_pool3_16.
extern "C" __global__ void k_max_pool3_nhwc8(TD x, TD out, int sh, int sw, int ph, int pw) {
  pdl_enter();
  unsigned C8 = (unsigned)out.sh[1] / 8, OH = (unsigned)out.sh[2], OW = (unsigned)out.sh[3];
  int H = (int)x.sh[2], W = (int)x.sh[3];
  unsigned total = (unsigned)out.sh[0] * C8 * OH * OW;
  const unsigned short* xp = (const unsigned short*)x.ptr;
  unsigned short* op = (unsigned short*)out.ptr;
  for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    unsigned n, c8, oy, ox;
    split_nchw<unsigned>(e, C8, OH, OW, 1, n, c8, oy, ox);
    const i64 xb = n * x.st[0] + c8 * 8;
    const int hs = (int)oy * sh - ph, ws = (int)ox * sw - pw;
    uint4 raw[9];
    bool in[9];
#pragma unroll
    for (int i = 0; i < 3; ++i) {
#pragma unroll
      for (int j = 0; j < 3; ++j) {
        const int yy = hs + i, xx = ws + j;
        in[i * 3 + j] = yy >= 0 && yy < H && xx >= 0 && xx < W;
        const int yc = min(max(yy, 0), H - 1), xc = min(max(xx, 0), W - 1);
        raw[i * 3 + j] = *(const uint4*)(xp + xb + yc * x.st[2] + xc * x.st[3]);
      }
    }
    unsigned int w[4];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float m = -NPU_INF;
#pragma unroll
      for (int q = 0; q < 9; ++q) {
        const unsigned int word = ((const unsigned int*)&raw[q])[k / 2];
        const float v = h16_to_f32((unsigned short)((k & 1) ? word >> 16 : word & 0xffffu), x.dt);
        if (in[q] && (v > m || v != v)) m = v;
      }
      const unsigned int h = x.dt == DT_BF16 ? f32_to_bf16(m) : f32_to_f16(m);
      if (k & 1) w[k / 2] |= h << 16; else w[k / 2] = h;
    }
    *(uint4*)(op + n * out.st[0] + c8 * 8 + oy * out.st[2] + ox * out.st[3]) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// kind 0 = max, 1 = avg. p = {kh, kw, sh, sw, ph, pw, dh, dw, count_include_pad, divisor (0 = none)}.
extern "C" __global__ void k_pool2d(TD x, TD out, int kind, int kh, int kw, int sh, int sw, int ph,
                                    int pw, int dh, int dw, int cip, int divisor, int cl) {
  pdl_enter();
  i64 N = out.sh[0], C = out.sh[1], OH = out.sh[2], OW = out.sh[3];
  i64 H = x.sh[2], W = x.sh[3];
  i64 total = N * C * OH * OW;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    i64 n, c, oy, ox;
    split_nchw<i64>(e, C, OH, OW, cl, n, c, oy, ox);
    i64 xb = n * x.st[0] + c * x.st[1];
    i64 hs = oy * sh - ph, ws = ox * sw - pw;
    float v;
    if (kind == 0) {
      float m = -NPU_INF;
      for (int i = 0; i < kh; ++i) {
        i64 yy = hs + i * dh;
        if (yy < 0 || yy >= H) continue;
        for (int j = 0; j < kw; ++j) {
          i64 xx = ws + j * dw;
          if (xx < 0 || xx >= W) continue;
          float t = ld(x, xb + yy * x.st[2] + xx * x.st[3]);
          if (t > m || t != t) m = t;
        }
      }
      v = m;
    } else {
      i64 he = min(hs + kh, H + ph), we = min(ws + kw, W + pw);
      i64 pool = (he - hs) * (we - ws);
      i64 h0 = max(hs, (i64)0), w0 = max(ws, (i64)0), h1 = min(he, H), w1 = min(we, W);
      float s = 0.0f;
      for (i64 yy = h0; yy < h1; ++yy)
        for (i64 xx = w0; xx < w1; ++xx) s += ld(x, xb + yy * x.st[2] + xx * x.st[3]);
      float div = divisor > 0 ? (float)divisor
                  : cip ? (float)pool
                        : (float)(max(h1 - h0, (i64)0) * max(w1 - w0, (i64)0));
      v = s / div;
    }
    st(out, n * out.st[0] + c * out.st[1] + oy * out.st[2] + ox * out.st[3], v);
  }
}

extern "C" __global__ void k_adaptive_avg_pool2d(TD x, TD out, int cl) {
  pdl_enter();
  i64 N = out.sh[0], C = out.sh[1], OH = out.sh[2], OW = out.sh[3];
  i64 H = x.sh[2], W = x.sh[3];
  i64 total = N * C * OH * OW;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    i64 n, c, oy, ox;
    split_nchw<i64>(e, C, OH, OW, cl, n, c, oy, ox);
    i64 xb = n * x.st[0] + c * x.st[1];
    i64 h0 = oy * H / OH, h1 = ((oy + 1) * H + OH - 1) / OH;
    i64 w0 = ox * W / OW, w1 = ((ox + 1) * W + OW - 1) / OW;
    float s = 0.0f;
    for (i64 yy = h0; yy < h1; ++yy)
      for (i64 xx = w0; xx < w1; ++xx) s += ld(x, xb + yy * x.st[2] + xx * x.st[3]);
    i64 cnt = (h1 - h0) * (w1 - w0);
    st(out, n * out.st[0] + c * out.st[1] + oy * out.st[2] + ox * out.st[3], s / (float)(cnt > 0 ? cnt : 1));
  }
}

// Adaptive average pooling with one warp per output, for windows of a warp's size or more (the
// global pooling of squeeze-excitation blocks: one thread per output summed thousands of
// pixels serially). Lanes stride over the window; the same bounds as k_adaptive_avg_pool2d.
extern "C" __global__ void k_adaptive_avg_pool2d_warp(TD x, TD out, int cl) {
  pdl_enter();
  i64 N = out.sh[0], C = out.sh[1], OH = out.sh[2], OW = out.sh[3];
  i64 H = x.sh[2], W = x.sh[3];
  i64 total = N * C * OH * OW;
  int lane = threadIdx.x & 31;
  i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
  for (i64 e = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5); e < total; e += warps) {
    i64 n, c, oy, ox;
    split_nchw<i64>(e, C, OH, OW, cl, n, c, oy, ox);
    i64 xb = n * x.st[0] + c * x.st[1];
    i64 h0 = oy * H / OH, h1 = ((oy + 1) * H + OH - 1) / OH;
    i64 w0 = ox * W / OW, w1 = ((ox + 1) * W + OW - 1) / OW;
    i64 ww = w1 - w0, cnt = (h1 - h0) * ww;
    float s = 0.0f;
    for (i64 t = lane; t < cnt; t += 32) s += ld(x, xb + (h0 + t / ww) * x.st[2] + (w0 + t % ww) * x.st[3]);
    s = warp_sum(s);
    if (lane == 0) st(out, n * out.st[0] + c * out.st[1] + oy * out.st[2] + ox * out.st[3], s / (float)(cnt > 0 ? cnt : 1));
  }
}

// Copies n bytes between page-locked host memory (its mapped address) and device memory, 16
// bytes a thread where both ends are 16-byte aligned (staging and device buffers are): a run's
// small inputs and outputs crossing the host link inside the replayed graph. With wdst, one
// thread also stores *wsrc (0 without wsrc) there: the error word cleared by the first input's
// copy and brought back by the last output's, so neither takes a launch of its own.
extern "C" __global__ void k_copy_bytes(const unsigned char* src, unsigned char* dst, i64 n, const unsigned* wsrc,
                                        unsigned* wdst) {
  pdl_enter();
  if (wdst && blockIdx.x == 0 && threadIdx.x == 0) *wdst = wsrc ? *wsrc : 0u;
  i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x, stride = (i64)gridDim.x * blockDim.x;
  i64 n16 = n / 16;
  for (i64 i = t; i < n16; i += stride) ((uint4*)dst)[i] = ((const uint4*)src)[i];
  for (i64 i = n16 * 16 + t; i < n; i += stride) dst[i] = src[i];
}

// Zeroes the error word (first launch of every run whose input copies do not: host_io.rs).
extern "C" __global__ void k_clear_err(int* err) { pdl_enter(); *err = 0; }
