//! One launch for an attention layer's RoPE and KV-cache writes (`npu_program::groups`
//! finds the four steps and states when one launch equals running them in order):
//! `k_rope_cache`, `k_rope_cache8` over 16-bit rows of enough elements, or `k_rope_cache_dec`
//! over a decode step's rows.

use super::{kl, td, Planner, StepPlan};
use crate::launch::{dtype_code, grid_for, Arg, Launch};
use crate::loc::Loc;
use npu_ir::DType;
use npu_program::groups::{index_copy_axis, rope_cache, RopeCache};
use npu_program::program::{Binding, Step};

/// `k_rope_cache8`'s layouts: every rotation over 16-bit rows of a length that splits into
/// halves of whole 16-byte chunks, the cache writes along a dim other than the last into
/// 16-bit rows of the same dtype.
fn vector_layouts(g: &RopeCache) -> bool {
    let rope = |s: &Step| {
        let d = s.outputs[0].shape.last().copied().unwrap_or(0);
        d.is_multiple_of(16) && s.inputs.iter().chain(&s.outputs).all(rows16)
    };
    let write = |s: &Step, src: &Binding| {
        let (dest, r) = (&s.outputs[0], s.outputs[0].shape.len());
        rows16(dest) && rows16(src) && src.dtype == dest.dtype && index_copy_axis(s) + 1 != r
    };
    rope(g.q)
        && rope(g.k)
        && g.k_write.is_none_or(|s| write(s, &g.k.outputs[0]))
        && g.v_write.is_none_or(|s| write(s, &s.inputs[1]))
}

/// The element stride between consecutive rows of `b`, its dims but the last (and `skip`)
/// walked in row-major order, where one stride does it (size-1 dims aside; 0 for a single
/// row or rows broadcast with stride 0).
pub(super) fn row_stride(b: &Binding, skip: Option<usize>) -> Option<usize> {
    let r = b.shape.len();
    let mut stride = None;
    let mut next = 0;
    for i in (0..r.saturating_sub(1)).rev() {
        if Some(i) == skip || b.shape[i] == 1 {
            continue;
        }
        match stride {
            None => stride = Some(b.strides[i]),
            Some(_) if b.strides[i] != next => return None,
            Some(_) => {}
        }
        next = b.strides[i].checked_mul(b.shape[i])?;
    }
    Some(stride.unwrap_or(0))
}

/// A rotation's operands for `k_rope_cache_dec`, each as (pointer, row stride) arguments,
/// and its row count.
pub(super) struct DecRope {
    pub x: [Arg; 2],
    pub c: [Arg; 2],
    pub s: [Arg; 2],
    pub out: [Arg; 2],
    pub rows: usize,
}

impl DecRope {
    /// x, c, s, out in `k_rope_cache_dec`'s parameter order.
    fn args(&self) -> impl Iterator<Item = Arg> + '_ {
        [self.x, self.c, self.s, self.out].into_iter().flatten()
    }
}

/// A rotation's operands flattened to rows; None where a row stride each does not describe
/// them. x and out have one shape; the tables have it too or are one row (broadcast over x's
/// rows, as the generic kernel's walk reads a table whose leading dims are all 1).
fn dec_rope(st: &Step) -> Option<DecRope> {
    let out = &st.outputs[0];
    let r = out.shape.len();
    let fits = |b: &Binding| {
        b.shape == out.shape
            || (b.shape.len() == r
                && b.shape[r - 1] == out.shape[r - 1]
                && b.shape[..r - 1].iter().all(|&n| n == 1))
    };
    let [x, c, s] = [0, 1, 2].map(|i| st.inputs.get(i));
    let (x, c, s) = (x?, c?, s?);
    if x.shape != out.shape || ![x, c, s, out].iter().all(|b| fits(b)) {
        return None;
    }
    let rows = |b: &Binding| Some([Arg::ptr_of(b), Arg::I64(row_stride(b, None)? as i64)]);
    let d = *out.shape.last()?;
    Some(DecRope {
        x: rows(x)?,
        c: rows(c)?,
        s: rows(s)?,
        out: rows(out)?,
        rows: out.numel() / d.max(1),
    })
}

/// A one-position cache write's arguments (dest pointer, row stride, position stride), its
/// source (src pointer and row stride) and the cache length, where src's rows (all dims but
/// the index axis, of size 1 there, and the last) map onto dest's by one row stride each.
fn dec_write(st: &Step) -> Option<([Arg; 3], [Arg; 2], usize, usize)> {
    let (src, dest) = (&st.inputs[1], &st.outputs[0]);
    let axis = index_copy_axis(st);
    let r = dest.shape.len();
    let same = (0..r).all(|i| i == axis || src.shape[i] == dest.shape[i]);
    if axis + 1 >= r || src.shape.len() != r || src.shape[axis] != 1 || !same {
        return None;
    }
    let rows = src.numel() / dest.shape[r - 1].max(1);
    Some((
        [
            Arg::ptr_of(dest),
            Arg::I64(row_stride(dest, Some(axis))? as i64),
            Arg::I64(dest.strides[axis] as i64),
        ],
        [
            Arg::ptr_of(src),
            Arg::I64(row_stride(src, Some(axis))? as i64),
        ],
        rows,
        dest.shape[axis],
    ))
}

/// The longest cache `k_rope_cache_dec` writes. Qwen2.5-1.5B decode (H200, sixteenth
/// session of 2026-11-28, A/B against `k_rope_cache` in the same build, three rounds): at 1000
/// of 2048 positions 1.4834 -> 1.4604 ms a step, at 32000 of 32768 1.9090 -> 1.9337, the same
/// with blocks of 32 or 64 threads. Not understood: the RoPE launch itself got shorter at
/// both (per-launch profile 0.205 -> 0.145 ms). Not the decode attention's 33 MB of pre-wait
/// K/V prefetches either: with them cut to one tile a split it still lost at 32000 (1.8664 ->
/// 1.8849, seventeenth session). Sizes between are not measured.
const DEC_MAX_CACHE: usize = 4096;

/// Elements from which the group takes `k_rope_cache8`'s vector items.
const VEC_MIN: usize = 1 << 16;

/// 16-bit with contiguous rows starting 16 bytes aligned: eight elements a 16-byte access.
fn rows16(b: &Binding) -> bool {
    let r = b.shape.len();
    b.dtype.size_bytes() == 2
        && b.dtype.is_float()
        && r >= 1
        && b.strides[r - 1] == 1
        && b.strides[..r - 1].iter().all(|s| s.is_multiple_of(8))
        && b.byte_offset.is_multiple_of(16)
        && b.shape[r - 1].is_multiple_of(8)
}

impl Planner<'_> {
    /// One launch for the RoPE / KV-cache group starting at `steps[0]`, and how many steps
    /// it replaces; None where the steps there are not such a group.
    pub(crate) fn rope_cache(&self, steps: &[Step]) -> Option<(usize, StepPlan)> {
        let g = rope_cache(steps)?;
        if let Some(launch) = self.rope_cache_dec(&g) {
            return Some((g.len(), vec![launch].into()));
        }
        let (q, k) = (g.q, g.k);
        let (nq, nk) = (q.outputs[0].numel(), k.outputs[0].numel());
        // Absent parts: bindings of the k step (never read: their element counts are 0).
        let (k_idx, k_dest, k_axis) = match g.k_write {
            Some(s) => (&s.inputs[0], &s.outputs[0], index_copy_axis(s) as i32),
            None => (&k.inputs[0], &k.outputs[0], 0),
        };
        let (v_idx, v_src, v_dest, nv) = match g.v_write {
            Some(s) => (
                &s.inputs[0],
                &s.inputs[1],
                &s.outputs[0],
                s.inputs[1].numel(),
            ),
            None => (&k.inputs[0], &k.inputs[0], &k.outputs[0], 0),
        };
        let mut args: Vec<Arg> = q.inputs.iter().map(td).collect();
        args.extend([td(&q.outputs[0]), Arg::I64(nq as i64)]);
        args.extend(k.inputs.iter().map(td));
        args.extend([td(&k.outputs[0]), Arg::I64(nk as i64)]);
        args.extend([
            Arg::I32(i32::from(g.k_write.is_some())),
            td(k_idx),
            td(k_dest),
            Arg::I32(k_axis),
        ]);
        args.extend([td(v_idx), td(v_src), td(v_dest)]);
        args.push(Arg::I32(g.v_write.map_or(0, |s| index_copy_axis(s) as i32)));
        // The index_copy steps' own numbers, for the error word.
        let k_step = self.step + 2;
        let v_step = k_step + usize::from(g.k_write.is_some());
        args.extend([
            Arg::I64(nv as i64),
            Arg::Ptr(0, Loc::Err),
            Arg::I32(k_step as i32),
            Arg::I32(v_step as i32),
        ]);
        // A decode step's 2,048 elements are faster one per thread (its 144 vector items left
        // most of the GPU idle: 11.0 -> 14.3 us a step on the H100); a 128-token prefill's
        // 262,144 in vector items (16.3 -> 13.6 us).
        let (name, threads) = if nq + nk + nv >= VEC_MIN && vector_layouts(&g) {
            ("k_rope_cache8", nq / 16 + nk / 16 + nv / 8)
        } else {
            ("k_rope_cache", nq + nk + nv)
        };
        // Every operand but the indices, for the per-dtype instances.
        let values = q
            .inputs
            .iter()
            .chain(&q.outputs)
            .chain(&k.inputs)
            .chain(&k.outputs);
        let writes = [k_dest, v_src, v_dest];
        let dtypes: Vec<i32> = values.chain(writes).map(|b| dtype_code(b.dtype)).collect();
        let launch: Launch = kl(
            self.f_dt(name, &dtypes),
            (grid_for(threads), 1, 1),
            256,
            0,
            args,
        );
        Some((g.len(), vec![launch].into()))
    }

    /// `k_rope_cache_dec` for a decode step's group ([`dec_group`]) with a cache of at most
    /// `DEC_MAX_CACHE` positions; None otherwise or with `NPU_CUDA_ROPE_DEC=0`.
    fn rope_cache_dec(&self, g: &RopeCache) -> Option<Launch> {
        if std::env::var("NPU_CUDA_ROPE_DEC").is_ok_and(|v| v == "0") {
            return None;
        }
        let dg = dec_group(g)?;
        if dg.t > DEC_MAX_CACHE {
            return None;
        }
        let mut args: Vec<Arg> = dg.q.args().collect();
        args.push(Arg::I32(dg.q.rows as i32));
        args.extend(dg.k.args());
        args.push(Arg::I32(dg.k.rows as i32));
        args.extend(dg.k_dest);
        args.extend(dg.v_src);
        args.extend(dg.v_dest);
        args.push(Arg::I32(dg.v_rows as i32));
        let k_step = self.step + 2;
        args.extend([
            Arg::ptr_of(dg.index),
            Arg::I32(i32::from(dg.index.dtype == DType::I64)),
            Arg::I64(dg.t as i64),
            Arg::I32(dg.d as i32),
            Arg::I32(dtype_code(dg.dt)),
            Arg::Ptr(0, Loc::Err),
            Arg::I32(k_step as i32),
            Arg::I32(k_step as i32 + 1),
        ]);
        let items = (dg.q.rows + dg.k.rows) * (dg.d / 16) + dg.v_rows * (dg.d / 8);
        let code = dtype_code(dg.dt);
        Some(kl(
            self.f_dt("k_rope_cache_dec", &[code, code]),
            (grid_for(items), 1, 1),
            256,
            0,
            args,
        ))
    }
}

/// A decode step's RoPE / cache group flattened to rows (`k_rope_cache_dec`'s contract, and
/// `k_gemv16_rope`'s epilogue's): fewer than `VEC_MIN` elements, both cache writes at one
/// position from one one-element index, every operand in one 16-bit dtype in
/// `k_rope_cache8`'s layouts, rows a stride apart.
pub(super) struct DecGroup<'g> {
    /// The rotations of the queries and the keys.
    pub q: DecRope,
    pub k: DecRope,
    /// The key cache: pointer, row stride, position stride.
    pub k_dest: [Arg; 3],
    /// The values written: pointer, row stride.
    pub v_src: [Arg; 2],
    /// The value cache, as `k_dest`.
    pub v_dest: [Arg; 3],
    pub v_rows: usize,
    pub index: &'g Binding,
    /// Cache positions.
    pub t: usize,
    /// Row length (the head dim).
    pub d: usize,
    pub dt: DType,
}

/// `g` as a [`DecGroup`]; None where it is not one.
pub(super) fn dec_group<'g>(g: &RopeCache<'g>) -> Option<DecGroup<'g>> {
    let (kw, vw) = (g.k_write?, g.v_write?);
    let (nq, nk) = (g.q.outputs[0].numel(), g.k.outputs[0].numel());
    let nv = vw.inputs[1].numel();
    let index = &kw.inputs[0];
    let one_index = index.numel() == 1 && matches!(index.dtype, DType::I64 | DType::I32);
    if nq + nk + nv >= VEC_MIN || !vector_layouts(g) || *index != vw.inputs[0] || !one_index {
        return None;
    }
    let dt = g.q.outputs[0].dtype;
    let all: Vec<&Binding> = [g.q, g.k, kw, vw]
        .iter()
        .flat_map(|s| s.inputs.iter().chain(&s.outputs))
        .filter(|b| *b != index)
        .collect();
    if all.iter().any(|b| b.dtype != dt) {
        return None;
    }
    let q = dec_rope(g.q)?;
    let k = dec_rope(g.k)?;
    let (k_dest, _, k_rows, t) = dec_write(kw)?;
    let (v_dest, v_src, v_rows, vt) = dec_write(vw)?;
    let d = *g.q.outputs[0].shape.last()?;
    if k_rows != k.rows || vt != t || *vw.inputs[1].shape.last()? != d {
        return None;
    }
    Some(DecGroup {
        q,
        k,
        k_dest,
        v_src,
        v_dest,
        v_rows,
        index,
        t,
        d,
        dt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use npu_program::groups::fixtures::decoder_layer as layer;

    #[test]
    fn sixteen_byte_rows_take_the_vector_path() {
        let steps = layer();
        assert!(vector_layouts(&rope_cache(&steps).expect("a group")));
        // the sin table 8 bytes into a 16-byte line
        let mut steps = layer();
        steps[1].inputs[2].byte_offset += 8;
        assert!(!vector_layouts(&rope_cache(&steps).expect("a group")));
        // a head dim whose halves are not whole 16-byte chunks
        let mut steps = layer();
        for st in &mut steps {
            for bd in st.inputs.iter_mut().chain(st.outputs.iter_mut()) {
                if bd.shape.len() == 4 {
                    bd.shape[3] = 72;
                }
            }
        }
        assert!(!vector_layouts(&rope_cache(&steps).expect("a group")));
        // f32 tables
        let mut steps = layer();
        steps[0].inputs[1].dtype = DType::F32;
        assert!(!vector_layouts(&rope_cache(&steps).expect("a group")));
    }

    /// The I64 arguments (strides), in order.
    fn strides(args: &[Arg]) -> Vec<i64> {
        args.iter()
            .filter_map(|a| match a {
                Arg::I64(v) => Some(*v),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_decode_group_flattens_to_rows() {
        let steps = layer();
        // q: 12 rows of 128, the tables one row broadcast over them
        let q = dec_rope(&steps[0]).expect("rows");
        let q_args: Vec<Arg> = q.args().collect();
        assert_eq!((strides(&q_args), q.rows), (vec![128, 0, 0, 128], 12));
        assert_eq!(dec_rope(&steps[1]).expect("rows").rows, 2);
        // the key cache [1, 2, 2048, 128] at one position: rows 2048 * 128 apart
        let (dest, src, rows, t) = dec_write(&steps[2]).expect("a one-position write");
        assert_eq!(
            (strides(&dest), strides(&src)),
            (vec![2048 * 128, 128], vec![128])
        );
        assert_eq!((rows, t), (2, 2048));
        // rows no single stride walks: a head-major x whose heads are 200 elements apart
        // but whose batch is not 12 * 200 apart
        let mut steps = layer();
        let x = &mut steps[0].inputs[0];
        x.shape = vec![2, 12, 1, 128];
        x.strides = vec![3000, 200, 128, 1];
        steps[0].outputs[0].shape = x.shape.clone();
        assert!(dec_rope(&steps[0]).is_none());
        // two positions a step: not a one-position write
        let mut steps = layer();
        steps[2].inputs[1].shape[2] = 2;
        assert!(dec_write(&steps[2]).is_none());
    }

    #[test]
    fn row_strides_follow_row_major_order() {
        let b = |shape: &[usize], strides: &[usize]| Binding {
            slot: npu_program::program::Slot::Arena,
            byte_offset: 0,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            dtype: DType::BF16,
        };
        assert_eq!(row_stride(&b(&[2, 3, 8], &[24, 8, 1]), None), Some(8));
        // size-1 dims and the skipped axis do not count
        assert_eq!(row_stride(&b(&[1, 3, 1, 8], &[99, 8, 7, 1]), None), Some(8));
        assert_eq!(row_stride(&b(&[2, 9, 8], &[72, 8, 1]), Some(1)), Some(72));
        assert_eq!(row_stride(&b(&[1, 1, 8], &[8, 8, 1]), None), Some(0));
        assert_eq!(row_stride(&b(&[2, 3, 8], &[0, 0, 1]), None), Some(0));
        // q as a view of a fused q/k/v row (Qwen's decode): 12 heads 128 apart, the size-1
        // dims at any stride
        assert_eq!(
            row_stride(&b(&[1, 12, 1, 128], &[2048, 128, 2048, 1]), None),
            Some(128)
        );
        // heads padded apart from the batch: no one stride
        assert_eq!(row_stride(&b(&[2, 3, 8], &[30, 8, 1]), None), None);
    }
}
