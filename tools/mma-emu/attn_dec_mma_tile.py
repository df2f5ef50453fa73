"""One warp of attn_dec_mma_body's tile steps (crates/npu-cuda/src/kernels/attention.cu), its
index logic ported line for line onto an emulation of the PTX fragment layouts (ldmatrix with
and without .trans, mma.m16n8k16, movmatrix.trans; the layouts as the prefill's k_attn_mma,
which runs on the GPU, uses them), against numpy: S = Q K^T, the online softmax, O = P V, with masked keys
whose V rows hold inf. Prints the worst relative error: ~7e-4 with P rounded to f16 only in the
kernel, 0 with the reference rounding it too. Needs numpy (the project's .venv has it):
    .venv/bin/python tools/mma-emu/attn_dec_mma_tile.py"""
import numpy as np

rng = np.random.default_rng(0)
D, LD, KEYS, group = 128, 136, 64, 6
f16 = np.float16

def lane_g(l): return l >> 2
def lane_tq(l): return l & 3

def ldmatrix_x4(smem, addr, trans):
    # addr[l]: element index of the row lane l provides (row l & 7 of matrix l >> 3)
    mats = []
    for m in range(4):
        rows = [smem[addr[8 * m + r]: addr[8 * m + r] + 8] for r in range(8)]
        mats.append(np.array(rows))
    out = []
    for l in range(32):
        regs = []
        for m in range(4):
            M = mats[m].T if trans else mats[m]
            regs.append((M[lane_g(l)][2 * lane_tq(l)], M[lane_g(l)][2 * lane_tq(l) + 1]))
        out.append(regs)
    return out  # out[lane][reg] = (lo, hi)

def mma(c, a, b):
    # c[lane][4] f32, a[lane][4] pairs, b[lane][2] pairs -> D = A B + C
    A = np.zeros((16, 16)); B = np.zeros((16, 8)); C = np.zeros((16, 8))
    for l in range(32):
        g, t = lane_g(l), lane_tq(l)
        for i, (r, cc) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]):
            A[r][cc], A[r][cc + 1] = a[l][i]
        for i, k in enumerate([2 * t, 2 * t + 8]):
            B[k][g], B[k + 1][g] = b[l][i]
        for i, (r, cc) in enumerate([(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]):
            C[r][cc] = c[l][i]
    with np.errstate(invalid="ignore"):
        Dm = A @ B + C
    out = []
    for l in range(32):
        g, t = lane_g(l), lane_tq(l)
        out.append([Dm[g][2 * t], Dm[g][2 * t + 1], Dm[g + 8][2 * t], Dm[g + 8][2 * t + 1]])
    return out

def movmatrix_trans(x):
    M = np.zeros((8, 8))
    for l in range(32):
        M[lane_g(l)][2 * lane_tq(l)], M[lane_g(l)][2 * lane_tq(l) + 1] = x[l]
    T = M.T
    return [(T[lane_g(l)][2 * lane_tq(l)], T[lane_g(l)][2 * lane_tq(l) + 1]) for l in range(32)]

def h(x): return float(f16(x))

def run(warp, ntiles=2):
    Q = rng.standard_normal((8, D)).astype(f16); Q[group:] = 0
    m2 = [[-np.inf, -np.inf] for _ in range(32)]; l2 = [[0.0, 0.0] for _ in range(32)]
    acc = [[[0.0] * 4 for _ in range(D // 16)] for _ in range(32)]
    allK, allV, allok = [], [], []
    scale = 1 / np.sqrt(D)
    for tile in range(ntiles):
        K = rng.standard_normal((KEYS, D)).astype(f16)
        V = rng.standard_normal((KEYS, D)).astype(f16)
        okkey = rng.random(KEYS) > 0.3
        V[~okkey] = np.inf  # stale slots
        ks = np.zeros(KEYS * LD, dtype=f16); vs = np.zeros(KEYS * LD, dtype=f16)
        for r in range(KEYS):
            ks[r * LD: r * LD + D] = K[r]; vs[r * LD: r * LD + D] = V[r]
        allK.append(K[warp * 16: warp * 16 + 16]); allV.append(V[warp * 16: warp * 16 + 16]); allok.append(okkey[warp * 16: warp * 16 + 16])
        sc = [[[0.0] * 4 for _ in range(32)] for _ in range(2)]
        krow = [(warp * 16 + (l & 7) + ((l >> 3) & 1) * 8) * LD + ((l >> 3) >> 1) * 8 for l in range(32)]
        for kc in range(D // 16):
            ka = ldmatrix_x4(ks, [a + kc * 16 for a in krow], False)
            qb = [[(Q[lane_g(l)][kc * 16 + 2 * lane_tq(l)], Q[lane_g(l)][kc * 16 + 2 * lane_tq(l) + 1]),
                   (Q[lane_g(l)][kc * 16 + 2 * lane_tq(l) + 8], Q[lane_g(l)][kc * 16 + 2 * lane_tq(l) + 9])] for l in range(32)]
            sc[kc & 1] = mma(sc[kc & 1], ka, qb)
        s = []; ok = []
        for l in range(32):
            g = lane_g(l)
            okl = [bool(okkey[warp * 16 + g]), bool(okkey[warp * 16 + g + 8])]
            ok.append(okl)
            s.append([(sc[0][l][i] + sc[1][l][i]) * scale if okl[i >> 1] else -np.inf for i in range(4)])
        mx = [[max(s[l][0], s[l][2]), max(s[l][1], s[l][3])] for l in range(32)]
        for off in (4, 8, 16):
            mx = [[max(mx[l][hh], mx[l ^ off][hh]) for hh in range(2)] for l in range(32)]
        p = []
        for l in range(32):
            c = [0.0, 0.0]
            for hh in range(2):
                mn = max(m2[l][hh], mx[l][hh])
                c[hh] = 0.0 if m2[l][hh] == -np.inf else np.exp(m2[l][hh] - mn)
                m2[l][hh] = mn
            pl = [0.0 if s[l][i] == -np.inf else np.exp(s[l][i] - m2[l][i & 1]) for i in range(4)]
            p.append(pl)
            for hh in range(2):
                l2[l][hh] = l2[l][hh] * c[hh] + (pl[hh] + pl[hh + 2])
            for mt in range(D // 16):
                acc[l][mt][0] *= c[0]; acc[l][mt][1] *= c[1]; acc[l][mt][2] *= c[0]; acc[l][mt][3] *= c[1]
        pb0 = movmatrix_trans([(h(p[l][0]), h(p[l][1])) for l in range(32)])
        pb1 = movmatrix_trans([(h(p[l][2]), h(p[l][3])) for l in range(32)])
        lo = sum(1 << l for l in range(32) if ok[l][0]); hi = sum(1 << l for l in range(32) if ok[l][1])
        vrow = [(warp * 16 + (l & 7) + ((l >> 3) >> 1) * 8) * LD + ((l >> 3) & 1) * 8 for l in range(32)]
        for mt in range(D // 16):
            va = ldmatrix_x4(vs, [a + mt * 16 for a in vrow], True)
            for l in range(32):
                kq = 2 * lane_tq(l)
                za = ((lo >> (4 * kq)) & 1, (lo >> (4 * kq + 4)) & 1)
                zb = ((hi >> (4 * kq)) & 1, (hi >> (4 * kq + 4)) & 1)
                for r, z in ((0, za), (1, za), (2, zb), (3, zb)):
                    va[l][r] = tuple(v if zz else 0.0 for v, zz in zip(va[l][r], z))
            out = mma([acc[l][mt] for l in range(32)], va, [(pb0[l], pb1[l]) for l in range(32)])
            for l in range(32):
                acc[l][mt] = out[l]
    for off in (4, 8, 16):
        l2 = [[l2[l][hh] + l2[l ^ off][hh] for hh in range(2)] for l in range(32)]
    # reference: this warp's 16 keys of each tile, per head
    K = np.concatenate(allK).astype(np.float64); V = np.concatenate(allV).astype(np.float64); ok = np.concatenate(allok)
    S = (Q.astype(np.float64) @ K.T) * scale
    S[:, ~ok] = -np.inf
    M = S.max(axis=1, keepdims=True)
    P = np.exp(S - M)
    L = P.sum(axis=1)
    if ROUND: P = P.astype(np.float16).astype(np.float64)
    Vz = V.copy(); Vz[~ok] = 0
    O = P @ Vz
    worst = 0.0
    for l in range(32):
        g, t = lane_g(l), lane_tq(l)
        for hh in range(2):
            head = 2 * t + hh
            if head >= group: continue
            assert abs(m2[l][hh] - M[head][0]) < 1e-9, (l, hh, m2[l][hh], M[head][0])
            assert abs(l2[l][hh] - L[head]) / L[head] < 1e-6, (l, hh, l2[l][hh], L[head])
            for mt in range(D // 16):
                for i, (d, hd) in enumerate([(mt * 16 + g, 0), (mt * 16 + g, 1), (mt * 16 + g + 8, 0), (mt * 16 + g + 8, 1)]):
                    if hd != hh: continue
                    ref = O[head][d]
                    worst = max(worst, abs(acc[l][mt][i] - ref) / (abs(ref) + 1))
    return worst

ROUND = False
for w in range(4):
    print("warp", w, "worst rel err", run(w))
ROUND = True
for w in range(4):
    print("one tile, P rounded in the reference too: warp", w, "worst rel err", run(w, ntiles=1))
