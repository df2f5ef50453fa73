// Direct convolution for grouped and depthwise convolutions (NCHW through strided
// descriptors). The im2col + GEMM path launches three kernels per group, so a 960-channel
// depthwise convolution became 2,880 launches of a few MACs each; here one launch covers every
// group. One thread per output element with x fastest, so a warp reads neighbouring pixels of
// one channel and every lane shares the weight taps (a broadcast). Accumulation in f32 over the
// group's cg x kh x kw taps; padding taps are skipped (they add zero, as PyTorch's direct
// kernels do); then bias, the fused activation and one rounding store.
extern "C" __global__ void __launch_bounds__(256) k_conv_direct(TD x, TD w, TD bias, int has_bias, int act,
                                                               TD out, int groups, int sh, int sw, int ph,
                                                               int pw, int dh, int dw) {
  pdl_enter();
  const int O = (int)out.sh[1], OH = (int)out.sh[2], OW = (int)out.sh[3];
  const int H = (int)x.sh[2], W = (int)x.sh[3];
  const int cg = (int)x.sh[1] / groups, og = O / groups, KH = (int)w.sh[2], KW = (int)w.sh[3];
  const i64 total = out.sh[0] * (i64)O * OH * OW;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    const int ox = (int)(e % OW);
    i64 t = e / OW;
    const int oy = (int)(t % OH);
    t /= OH;
    const int o = (int)(t % O);
    const i64 n = t / O;
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
