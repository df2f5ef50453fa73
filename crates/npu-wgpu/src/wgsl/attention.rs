//! Decode attention (a few query rows over a long cache) split over the key axis: pass one
//! gives each (query row, block of `KEYS` keys) a workgroup that writes the block's maximum,
//! sum and unnormalized output to scratch; pass two merges a row's blocks. A decode step of 12
//! heads over 2048 slots then has 192 workgroups instead of 12 rows' worth of work. Many query
//! rows (prefill) keep the one-pass body in `kernels.rs`, whose scratch this would multiply.

use super::kernels::{dot_loop, mask_at, numel};
use super::pointwise::lit;
use super::{names, offset, unravel, Body, Operand};
use std::fmt::Write;

/// Keys per workgroup of pass one, one per lane for the scores.
const KEYS: u32 = 128;
const LANES: u32 = KEYS;
/// The most query rows per head that take the split body.
const MAX_ROWS: usize = 4;

/// The split body, or None for many query rows or head dims over 256 (the one-pass body
/// refuses those with its reason).
pub fn split(ops: &[Operand], n_in: usize, scale: f32, causal: bool) -> Option<Body> {
    let (q, k, v, out) = (&ops[0], &ops[1], &ops[2], &ops[n_in]);
    let (h, s, d) = (q.shape[1], q.shape[2], q.shape[3]);
    let (kvh, tlen) = (k.shape[1], k.shape[2]);
    if s > MAX_ROWS || d > 256 || d == 0 || tlen == 0 {
        return None;
    }
    let g = h / kvh.max(1);
    let rows_shape = &out.shape[..3];
    let rows = numel(rows_shape);
    let splits = tlen.div_ceil(KEYS as usize) as u64;
    let rec = d as u64 + 2;
    let kv = |op: &Operand, t: &str, c: &str| {
        offset(
            op,
            &["i0".into(), format!("(i1 / {g}u)"), t.into(), c.into()],
        )
    };
    let tmax = if causal {
        format!("min(i2 + 1u, {tlen}u)")
    } else {
        format!("{tlen}u")
    };
    let mask = mask_at(ops, n_in);
    // Keys whose rows are 16-byte aligned along D are read 16 bytes a load against q staged
    // as vec4s; others element by element.
    let rows16 = |op: &Operand| {
        super::gemv::per_load(op.dtype).filter(|&per| {
            d % per == 0
                && op.strides[3] == 1
                && op.base.is_multiple_of(per as u64)
                && op.shape[..3]
                    .iter()
                    .zip(&op.strides[..3])
                    .all(|(&n, &st)| n == 1 || st % per == 0)
        })
    };
    let per = rows16(k);
    // V read the same way where its 16-byte chunks of a row tile the lanes evenly: lane
    // `ch + CH * kg` sums chunk `ch` over keys `kg`, `kg + KG`, ... (`KG` key groups).
    let vper = rows16(v).filter(|&per| (LANES as usize).is_multiple_of(d / per));
    let dot = match per {
        Some(per) => {
            let row = offset(
                k,
                &[
                    "i0".into(),
                    format!("(i1 / {g}u)"),
                    "tt".into(),
                    "0u".into(),
                ],
            );
            let terms = if per == 8 {
                "dot(qs4[2u * c], w0) + dot(qs4[2u * c + 1u], w1)"
            } else {
                "dot(qs4[c], w0)"
            };
            format!(
                "            let kb = ({}u + {row}) / {per}u;
            for (var c = 0u; c < {}u; c++) {{ let u = wv{}(kb + c); {} qk += {terms}; }}",
                k.base,
                d / per,
                k.binding,
                super::gemv::unpack(k.dtype)
            )
        }
        None => dot_loop("qk", d, &|c: &str| {
            format!("qs[{c}] * ld1({})", kv(k, "tt", c))
        }),
    };
    let qi = |c: &str| offset(q, &["i0".into(), "i1".into(), "i2".into(), c.into()]);
    let stage_q = if per.is_some() {
        let v: Vec<String> = (0..4)
            .map(|j| format!("ld0({})", qi(&format!("(4u * c + {j}u)"))))
            .collect();
        format!(
            "    for (var c = lane; c < {}u; c += {LANES}u) {{ qs4[c] = vec4<f32>({}); }}",
            d / 4,
            v.join(", ")
        )
    } else {
        format!(
            "    for (var c = lane; c < {d}u; c += {LANES}u) {{ qs[c] = ld0({}); }}",
            qi("c")
        )
    };
    let mut one = String::new();
    let _ = writeln!(one, "    let sp = t % {splits}u; let row = t / {splits}u;");
    one += &unravel("i", "row", rows_shape);
    // A masked slot's probability is stored as -1 (by its bits, which a NaN score cannot
    // have), so its V row is never read: stale cache slots may hold NaN or Inf.
    let _ = writeln!(
        one,
        "{stage_q}
    workgroupBarrier();
    let tt = sp * {KEYS}u + lane;
    var sc = -3.0e38; var live = false;
    if (tt < {tmax}) {{
        let mv = {mask};
        if (mv > -65504.0) {{
            var qk = 0.0;
{dot}
            sc = qk * {sc} + mv; live = true;
        }}
    }}
    let mb = wg_max(select(-3.0e38, sc, live), lane);
    let p = select(-1.0, exp(sc - mb), live);
    pw[lane] = p;
    let l = wg_sum(select(0.0, p, live), lane);
    let o = t * {rec}u;
    if (lane == 0u) {{ scr[o] = mb; scr[o + 1u] = l; }}
{pv}",
        sc = lit(f64::from(scale)),
        pv = match vper {
            Some(per) => pv_vec(v, per, d, tlen, &kv(v, "tt", "0u")),
            None => pv_scalar(d, &kv(v, "tt", "c")),
        },
    );
    // Pass two: blocks that saw no live key (l = 0) weigh nothing, as the one-pass body's
    // lanes do; a row with none writes zeros.
    let mut two = unravel("i", "t", rows_shape);
    let mut oidx = names("i", 3);
    oidx.push("c".into());
    let _ = writeln!(
        two,
        "    let first = t * {splits}u;
    var mx = -3.0e38;
    for (var b = 0u; b < {splits}u; b++) {{ let o = (first + b) * {rec}u; if (!(scr[o + 1u] == 0.0) && scr[o] > mx) {{ mx = scr[o]; }} }}
    var lsum = 0.0;
    for (var b = 0u; b < {splits}u; b++) {{ let o = (first + b) * {rec}u; let l = scr[o + 1u]; lsum += l * select(exp(scr[o] - mx), 0.0, l == 0.0); }}
    for (var c = lane; c < {d}u; c += {LANES}u) {{
        var a = 0.0;
        for (var b = 0u; b < {splits}u; b++) {{ let o = (first + b) * {rec}u; let l = scr[o + 1u]; a += scr[o + 2u + c] * select(exp(scr[o] - mx), 0.0, l == 0.0); }}
        st{n_in}({}, select(a / lsum, 0.0, lsum == 0.0));
    }}",
        offset(out, &oidx)
    );
    let mut body = Body::new(one, rows * splits, LANES);
    body.then = Some((two, rows));
    body.scratch = rows * splits * rec;
    body.globals = match per {
        Some(_) => {
            body.vec4 = vec![k.binding];
            format!("var<workgroup> qs4: array<vec4<f32>, {}>;\n", d / 4)
        }
        None => format!("var<workgroup> qs: array<f32, {d}>;\n"),
    };
    let _ = writeln!(body.globals, "var<workgroup> pw: array<f32, {KEYS}>;");
    if let Some(per) = vper {
        body.vec4.push(v.binding);
        let _ = writeln!(
            body.globals,
            "var<workgroup> pv: array<vec4<f32>, {}>;",
            LANES as usize * per / 4
        );
    }
    Some(body)
}

/// Pass one's P.V over V's elements one at a time: lane `c` walks the block's keys for
/// channel `c` (`vo` is V's offset at key `tt`, channel `c`).
fn pv_scalar(d: usize, vo: &str) -> String {
    format!(
        "    for (var c = lane; c < {d}u; c += {LANES}u) {{
        var a = 0.0;
        for (var j = 0u; j < {KEYS}u; j++) {{
            let pj = pw[j];
            let tt = sp * {KEYS}u + j;
            if (bitcast<u32>(pj) != 0xbf800000u) {{ a += pj * ld2({vo}); }}
        }}
        scr[o + 2u + c] = a;
    }}"
    )
}

/// Pass one's P.V over V's rows 16 bytes a load (`per` elements; `row` is V's offset at key
/// `tt`, channel 0, without its base): each lane sums one chunk of a row over every `KG`-th
/// key, unmasked keys' loads issued without a branch (a masked slot's value, which may be
/// NaN, is selected away, and keys past the cache read its last row), then the key groups'
/// sums meet in `pv`. A block with no live key (l = 0) reads no V.
fn pv_vec(v: &Operand, per: usize, d: usize, tlen: usize, row: &str) -> String {
    let ch = d / per;
    let kg = LANES as usize / ch;
    let (decl, acc, keep) = if per == 8 {
        (
            "var a0 = vec4<f32>(); var a1 = vec4<f32>();",
            "a0 += select(z, pj * w0, on); a1 += select(z, pj * w1, on);",
            "pv[2u * lane] = a0; pv[2u * lane + 1u] = a1;",
        )
    } else {
        (
            "var a0 = vec4<f32>();",
            "a0 += select(z, pj * w0, on);",
            "pv[lane] = a0;",
        )
    };
    format!(
        "    let ch = lane % {ch}u; let z = vec4<f32>();
    {decl}
    if (l > 0.0) {{
        for (var j = lane / {ch}u; j < {KEYS}u; j += {kg}u) {{
            let pj = pw[j];
            let on = bitcast<u32>(pj) != 0xbf800000u;
            let tt = min(sp * {KEYS}u + j, {last}u);
            let u = wv{vb}(({base}u + {row}) / {per}u + ch);
            {unpack}
            {acc}
        }}
    }}
    {keep}
    workgroupBarrier();
    for (var c4 = lane; c4 < {d4}u; c4 += {LANES}u) {{
        var s = z;
        for (var g = 0u; g < {kg}u; g++) {{ s += pv[g * {d4}u + c4]; }}
        let so = o + 2u + 4u * c4;
        scr[so] = s.x; scr[so + 1u] = s.y; scr[so + 2u] = s.z; scr[so + 3u] = s.w;
    }}",
        last = tlen - 1,
        vb = v.binding,
        base = v.base,
        unpack = super::gemv::unpack(v.dtype),
        d4 = d / 4,
    )
}
