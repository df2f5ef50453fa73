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

// dest[.., index[i], ..] = src[.., i, ..] along `axis`.
extern "C" __global__ void k_index_copy(TD index, TD src, TD dest, int axis, i64 n, int* err, int step) {
  pdl_enter();
  bool ints = !is_float_dt(src.dt) && !is_float_dt(dest.dt);
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < n; e += (i64)gridDim.x * blockDim.x) {
    i64 lin = e, so = 0, dof = 0;
    bool ok = true;
    for (int d = src.rank - 1; d >= 0; --d) {
      i64 ix = lin % src.sh[d];
      lin /= src.sh[d];
      so += ix * src.st[d];
      i64 di = ix;
      if (d == axis) {
        di = ldi_dt(index.ptr, index.dt, offset_of(index, ix));
        if (di < 0 || di >= dest.sh[d]) ok = false;
      }
      dof += di * dest.st[d];
    }
    if (!ok) { report(err, step); continue; }
    if (ints) sti_dt(dest.ptr, dest.dt, dof, ldi_dt(src.ptr, src.dt, so));
    else st(dest, dof, ld(src, so));
  }
}

extern "C" __global__ void k_rope(TD x, TD c, TD s, TD out, i64 n) {
  pdl_enter();
  int r = x.rank;
  i64 d = x.sh[r - 1], h = d / 2;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < n; e += (i64)gridDim.x * blockDim.x) {
    i64 row = e / d, i = e % d;
    i64 xo = offset_lead(x, r - 1, row);
    float xv = ld(x, xo + i * x.st[r - 1]);
    float rot = i < h ? -ld(x, xo + (i + h) * x.st[r - 1]) : ld(x, xo + (i - h) * x.st[r - 1]);
    float cv = ld(c, offset_lead(c, r - 1, row) + i * c.st[r - 1]);
    float sv = ld(s, offset_lead(s, r - 1, row) + i * s.st[r - 1]);
    st(out, offset_lead(out, r - 1, row) + i * out.st[r - 1], xv * cv + rot * sv);
  }
}

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
extern "C" __global__ void k_rms_norm(TD x, TD w, float eps, TD out) {
  pdl_enter();
  int r = x.rank;
  i64 d = x.sh[r - 1], row = blockIdx.x;
  i64 xo = offset_lead(x, r - 1, row), oo = offset_lead(out, r - 1, row);
  i64 xs = x.st[r - 1], ws = w.st[w.rank - 1], os = out.st[r - 1];
  int nt = blockDim.x, t = threadIdx.x;
  bool regs = d <= (i64)RN_MAX * nt;
  float xv[RN_MAX], wv[RN_MAX];
  float ss = 0.0f;
  if (regs) {
#pragma unroll
    for (int j = 0; j < RN_MAX; ++j) {
      i64 i = t + (i64)j * nt;
      xv[j] = i < d ? ld(x, xo + i * xs) : 0.0f;
      wv[j] = i < d ? ld(w, i * ws) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < RN_MAX; ++j) ss += xv[j] * xv[j];
  } else {
    for (i64 i = t; i < d; i += nt) {
      float v = ld(x, xo + i * xs);
      ss += v * v;
    }
  }
  ss = block_sum(ss);
  float inv = 1.0f / sqrtf(ss / (float)d + eps);
  if (regs) {
#pragma unroll
    for (int j = 0; j < RN_MAX; ++j) {
      i64 i = t + (i64)j * nt;
      if (i < d) st(out, oo + i * os, round_dt(out.dt, xv[j] * inv) * wv[j]);
    }
  } else {
    for (i64 i = t; i < d; i += nt) {
      float v = ld(x, xo + i * xs);
      st(out, oo + i * os, round_dt(out.dt, v * inv) * ld(w, i * ws));
    }
  }
}

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

// kind 0 = max, 1 = avg. p = {kh, kw, sh, sw, ph, pw, dh, dw, count_include_pad, divisor (0 = none)}.
extern "C" __global__ void k_pool2d(TD x, TD out, int kind, int kh, int kw, int sh, int sw, int ph,
                                    int pw, int dh, int dw, int cip, int divisor) {
  pdl_enter();
  i64 N = out.sh[0], C = out.sh[1], OH = out.sh[2], OW = out.sh[3];
  i64 H = x.sh[2], W = x.sh[3];
  i64 total = N * C * OH * OW;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    i64 ox = e % OW, oy = (e / OW) % OH, c = (e / (OW * OH)) % C, n = e / (OW * OH * C);
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

extern "C" __global__ void k_adaptive_avg_pool2d(TD x, TD out) {
  pdl_enter();
  i64 N = out.sh[0], C = out.sh[1], OH = out.sh[2], OW = out.sh[3];
  i64 H = x.sh[2], W = x.sh[3];
  i64 total = N * C * OH * OW;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    i64 ox = e % OW, oy = (e / OW) % OH, c = (e / (OW * OH)) % C, n = e / (OW * OH * C);
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
extern "C" __global__ void k_adaptive_avg_pool2d_warp(TD x, TD out) {
  pdl_enter();
  i64 N = out.sh[0], C = out.sh[1], OH = out.sh[2], OW = out.sh[3];
  i64 H = x.sh[2], W = x.sh[3];
  i64 total = N * C * OH * OW;
  int lane = threadIdx.x & 31;
  i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
  for (i64 e = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5); e < total; e += warps) {
    i64 ox = e % OW, oy = (e / OW) % OH, c = (e / (OW * OH)) % C, n = e / (OW * OH * C);
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

// Zeroes the error word (first launch of every run).
extern "C" __global__ void k_clear_err(int* err) { pdl_enter(); *err = 0; }
