//! WGSL generation: one compute shader per program step, with the step's shapes, strides,
//! offsets and dtypes written into it as constants.
//!
//! Buffers are `array<u32>` (or `array<atomic<u32>>`) bound once each; every operand reads
//! and writes its elements through functions generated for its dtype (`ld{k}`, `ldi{k}`,
//! `st{k}`), so kernels are written once for f32, f16, bf16, integer and bool storage. f16
//! and bf16 are unpacked from and packed into 32-bit words (no `shader-f16` needed); an
//! output narrower than 32 bits is written with atomic and/or on its word, since two threads
//! may own the two halves of one word. Arithmetic is f32.
//!
//! Invariant: the step passed `Kernel::check` (the shared preparation path), so shapes and
//! arities are the contract's; what this module refuses is what WGSL or the adapter cannot do
//! (element offsets beyond u32, dtypes it has no access for, attention head dims over 256).

mod attention;
mod gemv;
mod kernels;
pub mod pointwise;
pub mod rope_cache;

use npu_ir::DType;
use npu_program::groups::RopeCache;
use npu_program::program::{Binding, Step};
use std::fmt::Write;

/// Threads per workgroup; dispatches are two-dimensional beyond 65535 workgroups.
pub const WORKGROUP: u32 = 64;

/// One operand of the step: which binding holds it and how it is laid out there.
#[derive(Debug, Clone)]
pub struct Operand {
    pub binding: usize,
    pub dtype: DType,
    /// Element offset of the operand's first element in its buffer.
    pub base: u64,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
}

/// How a buffer is bound: as `parts` bindings of `part_words` 32-bit words each (the last may
/// be shorter). One binding unless the buffer is larger than the adapter lets one binding be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub parts: u32,
    pub part_words: u64,
}

impl Layout {
    pub const WHOLE: Layout = Layout {
        parts: 1,
        part_words: u64::MAX,
    };
}

/// What the adapter allows a shader beyond WebGPU's defaults.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// Bytes of workgroup memory one workgroup may use.
    pub workgroup_bytes: u32,
}

/// One binding of a shader, in binding order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    /// Part `part` of the caller's distinct buffer `buffer`.
    Part { buffer: usize, part: u32 },
    /// The step's own scratch buffer (`scratch_bytes`).
    Scratch,
}

/// One dispatch of a step: the entry point, its work items and lanes per item (1: one thread
/// per item; more: each item is a whole workgroup of this many lanes).
#[derive(Debug, Clone)]
pub struct Pass {
    pub entry: &'static str,
    pub items: u64,
    pub lanes: u32,
}

/// A generated shader: its source, its bindings and the dispatches that run it, in order.
#[derive(Debug, Clone)]
pub struct Shader {
    pub source: String,
    pub bindings: Vec<Bind>,
    pub passes: Vec<Pass>,
    pub scratch_bytes: u64,
}

/// A kernel body over work item `t` (and, when `lanes` > 1, lane `lane` of the item's
/// workgroup), and the item count.
pub struct Body {
    pub code: String,
    pub items: u64,
    pub lanes: u32,
    /// Buffers (binding indices) the body also reads as `array<vec4<u32>>` through `wv{j}`
    /// (16 bytes a load).
    pub vec4: Vec<usize>,
    /// Module-scope declarations the body uses (workgroup arrays, helpers).
    pub globals: String,
    /// f32 words of scratch the body uses as `scr`.
    pub scratch: u64,
    /// A second pass with the same lanes, run after this one: its body and item count.
    pub then: Option<(String, u64)>,
}

impl Body {
    pub fn new(code: String, items: u64, lanes: u32) -> Body {
        Body {
            code,
            items,
            lanes,
            vec4: Vec::new(),
            globals: String::new(),
            scratch: 0,
            then: None,
        }
    }
}

/// Workgroup reductions for cooperative bodies (`LANES` lanes, a power of two): `wg_sum` and
/// `wg_max` are this one tree over `red`, `NAME` and `COMBINE(a, b)` substituted. Call them in
/// uniform control flow (every lane of the workgroup), as their barriers require.
const REDUCE: &str = r#"
fn NAME(v: f32, lane: u32) -> f32 {
    red[lane] = v;
    workgroupBarrier();
    for (var s = HALFu; s > 0u; s = s >> 1u) {
        if (lane < s) { red[lane] = COMBINE(red[lane], red[lane + s]); }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}
"#;

/// The reductions' WGSL for a workgroup of `lanes`.
fn reductions(lanes: u32) -> String {
    let mut s = format!("var<workgroup> red: array<f32, {lanes}>;");
    for (name, combine) in [("wg_sum", "p_add"), ("wg_max", "max")] {
        s += &REDUCE
            .replace("NAME", name)
            .replace("COMBINE", combine)
            .replace("HALF", &(lanes / 2).to_string());
    }
    s + "fn p_add(a: f32, b: f32) -> f32 { return a + b; }\n"
}

/// The operands of `step` given the buffer each binding lives in (`buffer_of` maps a binding
/// to a buffer id; operands on one buffer share one binding). Returns the operands (inputs
/// then outputs) and, for each distinct buffer in binding order, its id and whether the step
/// writes it with sub-word stores.
pub fn operands(
    step: &Step,
    mut buffer_of: impl FnMut(&Binding) -> usize,
) -> (Vec<Operand>, Vec<(usize, bool)>) {
    let mut buffers: Vec<(usize, bool)> = Vec::new();
    let n_in = step.inputs.len();
    let ops = step
        .inputs
        .iter()
        .chain(&step.outputs)
        .enumerate()
        .map(|(k, b)| {
            let id = buffer_of(b);
            let narrow_write = k >= n_in && b.dtype.size_bytes() < 4;
            let binding = match buffers.iter().position(|(i, _)| *i == id) {
                Some(p) => {
                    buffers[p].1 |= narrow_write;
                    p
                }
                None => {
                    buffers.push((id, narrow_write));
                    buffers.len() - 1
                }
            };
            Operand {
                binding,
                dtype: b.dtype,
                base: b.byte_offset / b.dtype.size_bytes() as u64,
                shape: b.shape.clone(),
                strides: b.strides.clone(),
            }
        })
        .collect();
    (ops, buffers)
}

/// `value` of the part of buffer `j` that word `i` falls in: `read(name, r)` with `name`
/// that part's binding and `r` the word's index there (one part: no test).
fn by_part(
    j: usize,
    view: &str,
    lay: Layout,
    per: u64,
    read: &dyn Fn(&str, &str) -> String,
) -> String {
    if lay.parts == 1 {
        return read(&format!("{view}{j}"), "i");
    }
    let mut s = format!("let p = i / {per}u; let r = i - p * {per}u; switch p {{");
    for p in 0..lay.parts {
        let case = if p + 1 == lay.parts {
            "default".to_string()
        } else {
            format!("case {p}u")
        };
        let _ = write!(s, " {case}: {{ {} }}", read(&format!("{view}{j}_{p}"), "r"));
    }
    s + " }"
}

/// Declares buffer `j`'s bindings (its parts, as words, and as 16-byte words when `vec4`)
/// and its accessors: `w{j}(word)`, `sw{j}(word, v)`, `sp{j}(word, v, mask)` (atomic
/// buffers) and `wv{j}(vec4 index)`. A buffer the step only reads, through both views, is
/// bound once as 16-byte words (`w{j}` picks its word out of them): a weight in parts then
/// takes half the bindings.
fn declare(
    src: &mut String,
    j: usize,
    (atomic, written): (bool, bool),
    lay: Layout,
    vec4: bool,
    binds: &mut Vec<Bind>,
) {
    let ty = if atomic {
        "array<atomic<u32>>"
    } else {
        "array<u32>"
    };
    let mut bind = |src: &mut String, view: &str, ty: &str| {
        for p in 0..lay.parts {
            let name = if lay.parts == 1 {
                format!("{view}{j}")
            } else {
                format!("{view}{j}_{p}")
            };
            let _ = writeln!(
                src,
                "@group(0) @binding({}) var<storage, read_write> {name}: {ty};",
                binds.len()
            );
            binds.push(Bind::Part { buffer: j, part: p });
        }
    };
    let per = lay.part_words;
    if vec4 && !written {
        bind(src, "v", "array<vec4<u32>>");
        let _ = writeln!(
            src,
            "fn wv{j}(i: u32) -> vec4<u32> {{ var v = vec4<u32>(); {} return v; }}",
            by_part(j, "v", lay, per / 4, &|b, r| format!("v = {b}[{r}];"))
        );
        let _ = writeln!(
            src,
            "fn w{j}(i: u32) -> u32 {{ return wv{j}(i >> 2u)[i & 3u]; }}"
        );
        return;
    }
    bind(src, "b", ty);
    let load = |b: &str, r: &str| {
        if atomic {
            format!("v = atomicLoad(&{b}[{r}]);")
        } else {
            format!("v = {b}[{r}];")
        }
    };
    let _ = writeln!(
        src,
        "fn w{j}(i: u32) -> u32 {{ var v = 0u; {} return v; }}",
        by_part(j, "b", lay, per, &load)
    );
    let store = |b: &str, r: &str| {
        if atomic {
            format!("atomicStore(&{b}[{r}], v);")
        } else {
            format!("{b}[{r}] = v;")
        }
    };
    let _ = writeln!(
        src,
        "fn sw{j}(i: u32, v: u32) {{ {} }}",
        by_part(j, "b", lay, per, &store)
    );
    if atomic {
        let _ = writeln!(
            src,
            "fn sp{j}(i: u32, v: u32, mask: u32) {{ {} }}",
            by_part(j, "b", lay, per, &|b, r| format!(
                "atomicAnd(&{b}[{r}], ~mask); atomicOr(&{b}[{r}], v & mask);"
            ))
        );
    }
    if vec4 {
        bind(src, "v", "array<vec4<u32>>");
        // Parts hold whole multiples of 4 words (`executable::storage`), so no 16-byte
        // load straddles two parts.
        let _ = writeln!(
            src,
            "fn wv{j}(i: u32) -> vec4<u32> {{ var v = vec4<u32>(); {} return v; }}",
            by_part(j, "v", lay, per / 4, &|b, r| format!("v = {b}[{r}];"))
        );
    }
}

/// The shader of `step` over `ops` (inputs then outputs) bound as `buffers` (each distinct
/// buffer's id and whether the step writes it with sub-word stores), each laid out as
/// `layout(id)` says.
pub fn shader(
    step: &Step,
    ops: &[Operand],
    buffers: &[(usize, bool)],
    layout: &dyn Fn(usize) -> Layout,
    caps: Caps,
) -> Result<Shader, String> {
    let body = kernels::body(step, ops, caps)?;
    assemble(step.inputs.len(), ops, buffers, layout, body)
}

/// The shader of a layer's RoPE and KV-cache steps run as one dispatch
/// (`npu_program::groups::rope_cache`), over the operands of the group's combined step
/// ([`rope_cache::combined`]).
pub fn rope_cache_shader(
    group: &RopeCache,
    ops: &[Operand],
    buffers: &[(usize, bool)],
    layout: &dyn Fn(usize) -> Layout,
) -> Result<Shader, String> {
    let body = rope_cache::body(group, ops);
    assemble(rope_cache::n_inputs(group), ops, buffers, layout, body)
}

/// A shader from its body: the operands' accessors (`n_in` inputs, then outputs), the
/// bindings, the body's globals and one entry point per pass.
fn assemble(
    n_in: usize,
    ops: &[Operand],
    buffers: &[(usize, bool)],
    layout: &dyn Fn(usize) -> Layout,
    body: Body,
) -> Result<Shader, String> {
    let mut src = String::new();
    src.push_str(CONVERT);
    src.push_str(pointwise::PRELUDE);
    for (k, op) in ops.iter().enumerate() {
        access(&mut src, k, op, k >= n_in, buffers[op.binding].1)?;
    }
    let mut bindings = Vec::new();
    for (j, (id, atomic)) in buffers.iter().enumerate() {
        let lay = layout(*id);
        declare(
            &mut src,
            j,
            (*atomic, ops[n_in..].iter().any(|o| o.binding == j)),
            lay,
            body.vec4.contains(&j),
            &mut bindings,
        );
    }
    if body.scratch > 0 {
        let _ = writeln!(
            src,
            "@group(0) @binding({}) var<storage, read_write> scr: array<f32>;",
            bindings.len()
        );
        bindings.push(Bind::Scratch);
    }
    src.push_str(&body.globals);
    let lanes = body.lanes;
    let mut passes = Vec::new();
    let all = std::iter::once(("main", body.code, body.items))
        .chain(body.then.map(|(code, items)| ("main2", code, items)));
    if lanes > 1 {
        src.push_str(&reductions(lanes));
    }
    for (entry, code, items) in all {
        if items > u64::from(u32::MAX) {
            return Err(format!("{items} work items, more than 2^32"));
        }
        if lanes > 1 {
            // The item index comes from the workgroup id alone, so the early return is
            // uniform and the reductions' barriers stay legal.
            let _ = write!(
                src,
                "@compute @workgroup_size({lanes})\nfn {entry}(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lane: u32, @builtin(num_workgroups) nwg: vec3<u32>) {{\n    let t = wid.x + wid.y * nwg.x;\n    if (t >= {items}u) {{ return; }}\n{code}}}\n"
            );
        } else {
            let _ = write!(
                src,
                "@compute @workgroup_size({WORKGROUP})\nfn {entry}(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n    let t = gid.x + gid.y * nwg.x * {WORKGROUP}u;\n    if (t >= {items}u) {{ return; }}\n{code}}}\n"
            );
        }
        passes.push(Pass {
            entry,
            items,
            lanes,
        });
    }
    Ok(Shader {
        source: src,
        bindings,
        passes,
        scratch_bytes: 4 * body.scratch,
    })
}

/// f32 to f16 and bf16 bits, round to nearest even, NaN and overflow as IEEE has them
/// (`pack2x16float` leaves out-of-range values undefined).
const CONVERT: &str = r#"
fn cv_f16(v: f32) -> u32 {
    let x = bitcast<u32>(v);
    let s = (x >> 16u) & 0x8000u;
    let a = x & 0x7fffffffu;
    if (a > 0x7f800000u) { return s | 0x7e00u; }
    if (a >= 0x477ff000u) { return s | 0x7c00u; }
    if (a >= 0x38800000u) { return s | ((a + 0x0fffu + ((a >> 13u) & 1u) - 0x38000000u) >> 13u); }
    return s | u32(round(abs(v) * 16777216.0));
}
fn cv_bf16(v: f32) -> u32 {
    let x = bitcast<u32>(v);
    if ((x & 0x7fffffffu) > 0x7f800000u) { return (x >> 16u) | 0x40u; }
    return (x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u;
}
fn rd_f16(v: f32) -> f32 { return unpack2x16float(cv_f16(v)).x; }
fn rd_bf16(v: f32) -> f32 { return bitcast<f32>(cv_bf16(v) << 16u); }
"#;

/// `v` rounded to `dt` as stored (a cast inside an expression, a residual's rounding).
pub fn round_to(dt: DType, v: &str) -> String {
    match dt {
        DType::F16 => format!("rd_f16({v})"),
        DType::BF16 => format!("rd_bf16({v})"),
        DType::Bool => format!("p_b(!({v} == 0.0))"),
        DType::I8 | DType::I16 | DType::I32 | DType::I64 | DType::U8 => format!("trunc({v})"),
        DType::F32 | DType::F64 => v.to_string(),
    }
}

/// `ld{k}(o) -> f32`, `ldi{k}(o) -> i32` and, for outputs, `st{k}(o, v: f32)`, where `o`
/// is the element offset from the operand's base.
fn access(
    src: &mut String,
    k: usize,
    op: &Operand,
    output: bool,
    atomic: bool,
) -> Result<(), String> {
    let j = op.binding;
    let base = op.base;
    if base > u64::from(u32::MAX) / 2 {
        return Err(format!(
            "operand {k} starts at element {base}, beyond u32 offsets"
        ));
    }
    let (ld, ldi) = match op.dtype {
        DType::F32 => ("bitcast<f32>(w{j}(e))".to_string(), "i32(bitcast<f32>(w{j}(e)))".to_string()),
        DType::F16 => (
            "unpack2x16float(w{j}(e >> 1u))[e & 1u]".into(),
            "i32(unpack2x16float(w{j}(e >> 1u))[e & 1u])".into(),
        ),
        DType::BF16 => (
            "bitcast<f32>(select(w{j}(e >> 1u) << 16u, w{j}(e >> 1u) & 0xffff0000u, (e & 1u) == 1u))".into(),
            "i32(bitcast<f32>(select(w{j}(e >> 1u) << 16u, w{j}(e >> 1u) & 0xffff0000u, (e & 1u) == 1u)))".into(),
        ),
        // The low word: ids, positions and indices fit 32 bits (larger ones are refused by
        // the kernels that read them).
        DType::I64 => ("f32(bitcast<i32>(w{j}(2u * e)))".into(), "bitcast<i32>(w{j}(2u * e))".into()),
        DType::I32 => ("f32(bitcast<i32>(w{j}(e)))".into(), "bitcast<i32>(w{j}(e))".into()),
        DType::Bool | DType::U8 => (
            "f32((w{j}(e >> 2u) >> ((e & 3u) * 8u)) & 0xffu)".into(),
            "i32((w{j}(e >> 2u) >> ((e & 3u) * 8u)) & 0xffu)".into(),
        ),
        other => return Err(format!("no WGSL access for {other}")),
    };
    let ld = ld.replace("{j}", &j.to_string());
    let ldi = ldi.replace("{j}", &j.to_string());
    let _ = writeln!(
        src,
        "fn ld{k}(o: u32) -> f32 {{ let e = o + {base}u; return {ld}; }}"
    );
    let _ = writeln!(
        src,
        "fn ldi{k}(o: u32) -> i32 {{ let e = o + {base}u; return {ldi}; }}"
    );
    if output {
        let store = match op.dtype {
            DType::F32 => format!("sw{j}(e, bitcast<u32>(v));"),
            DType::I32 => format!("sw{j}(e, bitcast<u32>(i32(v)));"),
            DType::I64 => format!(
                "let x = i32(v); sw{j}(2u * e, bitcast<u32>(x)); sw{j}(2u * e + 1u, select(0u, 0xffffffffu, x < 0));"
            ),
            DType::F16 | DType::BF16 if atomic => {
                let cv = if op.dtype == DType::F16 { "cv_f16" } else { "cv_bf16" };
                format!("let sh = (e & 1u) * 16u; sp{j}(e >> 1u, {cv}(v) << sh, 0xffffu << sh);")
            }
            DType::Bool | DType::U8 if atomic => {
                let val = if op.dtype == DType::Bool { "select(1u, 0u, v == 0.0)" } else { "u32(clamp(v, 0.0, 255.0))" };
                format!("let sh = (e & 3u) * 8u; sp{j}(e >> 2u, {val} << sh, 0xffu << sh);")
            }
            other => return Err(format!("no WGSL store for {other}")),
        };
        let _ = writeln!(
            src,
            "fn st{k}(o: u32, v: f32) {{ let e = o + {base}u; {store} }}"
        );
    }
    Ok(())
}

/// Statements declaring `{p}0..{p}{r-1}` as the row-major index of linear `lin` in `shape`.
pub fn unravel(p: &str, lin: &str, shape: &[usize]) -> String {
    let mut s = format!("    var {p}_rem = {lin};\n");
    for d in (0..shape.len()).rev() {
        let n = shape[d].max(1);
        let _ = writeln!(
            s,
            "    let {p}{d} = {p}_rem % {n}u; {p}_rem = {p}_rem / {n}u;"
        );
    }
    s
}

/// The element offset of index expressions `idx` in operand `op` (terms with stride 0 or a
/// dim of 1 dropped).
pub fn offset(op: &Operand, idx: &[String]) -> String {
    let terms: Vec<String> = idx
        .iter()
        .zip(&op.strides)
        .zip(&op.shape)
        .filter(|((_, s), n)| **s != 0 && **n != 1)
        .map(|((i, s), _)| {
            if *s == 1 {
                i.clone()
            } else {
                format!("{i} * {s}u")
            }
        })
        .collect();
    if terms.is_empty() {
        "0u".into()
    } else {
        format!("({})", terms.join(" + "))
    }
}

/// `{p}0 .. {p}{n-1}` as index expressions.
pub fn names(p: &str, n: usize) -> Vec<String> {
    (0..n).map(|d| format!("{p}{d}")).collect()
}
