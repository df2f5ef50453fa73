// Direct convolution for grouped and depthwise convolutions (NCHW through strided
// descriptors). The im2col + GEMM path launches three kernels per group, so a 960-channel
// depthwise convolution became 2,880 launches of a few MACs each; here one launch covers every
// group. One thread per output element with x fastest, so a warp reads neighbouring pixels of
// one channel and every lane shares the weight taps (a broadcast). Accumulation in f32 over the
// group's cg x kh x kw taps; padding taps are skipped (they add zero, as PyTorch's direct
// kernels do); then bias, the fused activation and one rounding store. A channels-last output
// (cl) takes the channel fastest instead, so a warp reads neighbouring channels of one pixel.
extern "C" __global__ void __launch_bounds__(256) k_conv_direct(TD x, TD w, TD bias, int has_bias, int act,
                                                               TD out, int groups, int sh, int sw, int ph,
                                                               int pw, int dh, int dw, int cl) {
  pdl_enter();
  const int O = (int)out.sh[1], OH = (int)out.sh[2], OW = (int)out.sh[3];
  const int H = (int)x.sh[2], W = (int)x.sh[3];
  const int cg = (int)x.sh[1] / groups, og = O / groups, KH = (int)w.sh[2], KW = (int)w.sh[3];
  const i64 total = out.sh[0] * (i64)O * OH * OW;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    i64 n, o64, oy64, ox64;
    split_nchw<i64>(e, O, OH, OW, cl, n, o64, oy64, ox64);
    const int o = (int)o64, oy = (int)oy64, ox = (int)ox64;
    const int g = o / og;
    const int y0 = oy * sh - ph, x0 = ox * sw - pw;
    float acc = 0.0f;
    for (int ci = 0; ci < cg; ++ci) {
      const i64 xc = n * x.st[0] + (i64)(g * cg + ci) * x.st[1];
      const i64 wc = (i64)o * w.st[0] + (i64)ci * w.st[1];
      for (int i = 0; i < KH; ++i) {
        const int yy = y0 + i * dh;
        if (yy < 0 || yy >= H) continue;
        for (int j = 0; j < KW; ++j) {
          const int xx = x0 + j * dw;
          if (xx < 0 || xx >= W) continue;
          acc += ld(x, xc + yy * x.st[2] + xx * x.st[3]) * ld(w, wc + i * w.st[2] + j * w.st[3]);
        }
      }
    }
    if (has_bias) acc += ld(bias, o * bias.st[bias.rank - 1]);
    if (act >= 0) acc = apply_unary(act, acc);
    st(out, n * out.st[0] + o * out.st[1] + oy * out.st[2] + ox * out.st[3], acc);
  }
}

// im2col for a channels-last 16-bit input: row p of col (an output pixel, n-major) holds the
// C x kh x kw taps in the weight's own [C, kh, kw] order, so the dense [O, C, kh, kw] weight
// is the GEMM's other operand as it lies. Per block of `pp` pixels: first each (pixel, tap)'s
// source offset (-1 outside the image) and row position, once; then every tap's channel run
// is read in 16-byte pieces and scattered into shared memory already in row order
// ([pixel][C][tap]), a thread keeping one 8-channel piece when 256 is a multiple of C/8 (no
// division in the loop); then the rows leave as 16-byte copies. (A first version gathered
// each row element across taps, 8 divisions and 8 two-byte reads per 16 bytes written: 39% of
// ResNet-50 b64 under ncu.) Requires C % 8 == 0 and 16-byte aligned channel runs (the planner
// checks); dynamic shared memory pp * K * 2 + pp * kh * kw * 12 bytes.
extern "C" __global__ void __launch_bounds__(256) k_im2col_nhwc(TD x, int kh, int kw, int sh, int sw, int ph,
                                                               int pw, int dh, int dw, int OH, int OW, int pp,
                                                               u64 col) {
  pdl_enter();
  extern __shared__ uint4 rows4[];
  const int C = (int)x.sh[1], H = (int)x.sh[2], W = (int)x.sh[3];
  const int KK = kh * kw, K = C * KK, c8 = C / 8, k8 = K / 8;
  unsigned short* rows = (unsigned short*)rows4;
  i64* src = (i64*)(rows4 + pp * k8);
  int* at = (int*)(src + pp * KK);
  const i64 P = x.sh[0] * (i64)OH * OW;
  const unsigned short* xp = (const unsigned short*)x.ptr;
  const bool even = (blockDim.x % c8) == 0;
  for (i64 p0 = (i64)blockIdx.x * pp; p0 < P; p0 += (i64)gridDim.x * pp) {
    const int np = (int)min((i64)pp, P - p0), nqt = np * KK;
    __syncthreads();
    for (int qt = threadIdx.x; qt < nqt; qt += blockDim.x) {
      const int q = qt / KK, t = qt - q * KK;
      const i64 p = p0 + q;
      const int ox = (int)(p % OW), oy = (int)((p / OW) % OH);
      const i64 n = p / ((i64)OW * OH);
      const int yy = oy * sh - ph + (t / kw) * dh, xx = ox * sw - pw + (t % kw) * dw;
      src[qt] = (yy >= 0 && yy < H && xx >= 0 && xx < W) ? n * x.st[0] + yy * x.st[2] + xx * x.st[3] : -1;
      at[qt] = q * K + t;
    }
    __syncthreads();
    const int cv0 = even ? (int)threadIdx.x % c8 : 0;
    const int step = even ? (int)blockDim.x / c8 : 0;
    for (int e = even ? (int)threadIdx.x / c8 : (int)threadIdx.x; e < (even ? nqt : nqt * c8);
         e += even ? step : (int)blockDim.x) {
      const int qt = even ? e : e / c8, cv = even ? cv0 : e % c8;
      const i64 off = src[qt];
      uint4 v = make_uint4(0, 0, 0, 0);
      if (off >= 0) v = *(const uint4*)(xp + off + cv * 8);
      unsigned short* r = rows + at[qt] + cv * 8 * KK;
      const unsigned int w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        r[(2 * u) * KK] = (unsigned short)(w[u] & 0xffffu);
        r[(2 * u + 1) * KK] = (unsigned short)(w[u] >> 16);
      }
    }
    __syncthreads();
    uint4* dst = (uint4*)col + p0 * k8;
    for (int e = threadIdx.x; e < np * k8; e += blockDim.x) dst[e] = rows4[e];
  }
}

// In-place activation of a 16-bit [rows, cols] matrix with rows `ld` elements apart (a
// channels-last convolution's output after cuBLASLt added the bias and rounded): only for
// activations that commute with rounding (ReLU, ReLU6), so act(round(v)) is round(act(v)),
// the one rounding PyTorch does; NaN stays NaN. cols and ld are multiples of 8, and the rows
// 16-byte aligned (the planner checks): 16 bytes per thread.
extern "C" __global__ void k_act_rows16(u64 ptr, i64 rows, int cols, i64 ld, int dt, int act) {
  pdl_enter();
  const int c8 = cols / 8;
  const i64 total = rows * c8;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    const i64 r = e / c8;
    const u64 p = ptr + 2 * (u64)(r * ld + (e - r * c8) * 8);
    float v[8];
    ld8(p, dt, 0, v);
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = apply_unary(act, v[u]);
    st8(p, dt, 0, v);
  }
}
