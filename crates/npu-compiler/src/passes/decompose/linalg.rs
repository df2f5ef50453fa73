//! Linear algebra onto `matmul` + views: addmv/addr/baddbmm, mv/dot/outer, einsum (pairwise
//! contractions as batched matmuls), conv1d and unbatched conv2d onto the conv2d kernel.

use super::emit::{Emitter, R};
use npu_ir::{Composite, Op, Padding1d, TensorType, ValueId};
use std::collections::HashMap;

/// `beta * x + alpha * m`; `x` is ignored when beta is 0 (ATen does not propagate its NaNs).
/// On integer tensors ATen takes the integer part of beta and alpha (0.6 scales by 0).
fn beta_alpha(em: &mut Emitter, x: ValueId, m: ValueId, beta: f64, alpha: f64) -> R<ValueId> {
    let (beta, alpha) = if em.dtype(m).is_float() {
        (beta, alpha)
    } else {
        (beta.trunc(), alpha.trunc())
    };
    let m = em.scale(m, alpha);
    if beta == 0.0 {
        return Ok(m);
    }
    let x = em.scale(x, beta);
    em.add(x, m)
}

/// `mat [n, m] @ vec [m]` as a matmul with a column.
fn matvec(em: &mut Emitter, mat: ValueId, vec: ValueId) -> R<ValueId> {
    let m = em.ty(vec).numel();
    let col = em.reshape(vec, &[m, 1]);
    let r = em.matmul(mat, col)?;
    let n = em.shape(r)[0];
    Ok(em.reshape(r, &[n]))
}

/// `a [n] x b [m] -> [n, m]`, a broadcast multiply.
fn outer_of(em: &mut Emitter, a: ValueId, b: ValueId) -> R<ValueId> {
    let (n, m) = (em.ty(a).numel(), em.ty(b).numel());
    let a = em.reshape(a, &[n, 1]);
    let b = em.reshape(b, &[1, m]);
    em.mul(a, b)
}

pub fn baddbmm(em: &mut Emitter) -> R<()> {
    let &Op::Baddbmm { beta, alpha } = &em.node.op else {
        return Err("internal: not baddbmm".into());
    };
    let (x, b1, b2) = (em.input(0)?, em.input(1)?, em.input(2)?);
    let m = em.matmul(b1, b2)?;
    let r = beta_alpha(em, x, m, beta, alpha)?;
    let out = em.shape(em.output(0)?);
    let r = em.expand(r, &out);
    em.bind(0, r)
}

pub fn addmv(em: &mut Emitter) -> R<()> {
    let &Composite::Addmv { beta, alpha } = em.composite()? else {
        return Err("internal: not addmv".into());
    };
    let (x, mat, vec) = (em.input(0)?, em.input(1)?, em.input(2)?);
    let m = matvec(em, mat, vec)?;
    let r = beta_alpha(em, x, m, beta, alpha)?;
    let out = em.shape(em.output(0)?);
    let r = em.expand(r, &out);
    em.bind(0, r)
}

pub fn addr(em: &mut Emitter) -> R<()> {
    let &Composite::Addr { beta, alpha } = em.composite()? else {
        return Err("internal: not addr".into());
    };
    let (x, a, b) = (em.input(0)?, em.input(1)?, em.input(2)?);
    let m = outer_of(em, a, b)?;
    let r = beta_alpha(em, x, m, beta, alpha)?;
    let out = em.shape(em.output(0)?);
    let r = em.expand(r, &out);
    em.bind(0, r)
}

pub fn mv(em: &mut Emitter) -> R<()> {
    let (mat, vec) = (em.input(0)?, em.input(1)?);
    let r = matvec(em, mat, vec)?;
    em.bind(0, r)
}

/// `sum(a * b)`.
pub fn dot(em: &mut Emitter) -> R<()> {
    let (a, b) = (em.input(0)?, em.input(1)?);
    let p = em.mul(a, b)?;
    let r = em.sum(p, &[0], false);
    em.bind(0, r)
}

pub fn outer(em: &mut Emitter) -> R<()> {
    let (a, b) = (em.input(0)?, em.input(1)?);
    let r = outer_of(em, a, b)?;
    em.bind(0, r)
}

/// conv1d as conv2d over `[N, C, 1, L]`; an unbatched `[C, L]` input gets a batch of one;
/// `padding="same"` with an odd total pads the extra column on the right, as ATen does.
pub fn conv1d(em: &mut Emitter) -> R<()> {
    let &Composite::Conv1d {
        stride,
        padding,
        dilation,
        groups,
    } = em.composite()?
    else {
        return Err("internal: not conv1d".into());
    };
    let (x, w) = (em.input(0)?, em.input(1)?);
    let (xs, ws) = (em.shape(x), em.shape(w));
    let (n, c, l) = match xs.as_slice() {
        [n, c, l] => (*n, *c, *l),
        [c, l] => (1, *c, *l),
        _ => return Err(format!("conv1d of a {xs:?} input")),
    };
    let [o, ci, k] = ws[..] else {
        return Err(format!("conv1d with a {ws:?} weight"));
    };
    let mut x4 = em.reshape(x, &[n, c, 1, l]);
    let pad = match padding {
        Padding1d::Explicit(p) => p,
        Padding1d::Valid => 0,
        Padding1d::Same => {
            let total = dilation * (k.max(1) - 1);
            let left = total / 2;
            if total - left > left {
                let dtype = em.dtype(x4);
                let z = em.full(&[n, c, 1, total - 2 * left], dtype, 0.0);
                x4 = em.cat(vec![x4, z], 3)?;
            }
            left
        }
    };
    let w4 = em.reshape(w, &[o, ci, 1, k]);
    let mut inputs = vec![x4, w4];
    inputs.extend(em.input(2).ok());
    let out = em.shape(em.output(0)?);
    let lout = *out.last().ok_or("conv1d output of rank 0")?;
    let ty = TensorType {
        shape: vec![n, o, 1, lout],
        dtype: em.dtype(em.output(0)?),
    };
    let y = em.emit1(
        Op::Conv2d {
            stride: [1, stride],
            padding: [0, pad],
            dilation: [1, dilation],
            groups,
        },
        inputs,
        ty,
    );
    em.bind(0, y)
}

/// conv2d of an unbatched `[C, H, W]` input: a batch of one.
pub fn conv2d_unbatched(em: &mut Emitter) -> R<()> {
    let op = em.node.op.clone();
    let x = em.input(0)?;
    let mut s = vec![1];
    s.extend(em.shape(x));
    let x4 = em.reshape(x, &s);
    let mut inputs = vec![x4];
    inputs.extend(em.node.inputs.get(1..).unwrap_or(&[]).iter().copied());
    let out = em.ty(em.output(0)?).clone();
    let mut shape = vec![1];
    shape.extend(&out.shape);
    let y = em.emit1(
        op,
        inputs,
        TensorType {
            shape,
            dtype: out.dtype,
        },
    );
    em.bind(0, y)
}

/// One einsum operand: its value and the label of each of its dims.
struct Term {
    v: ValueId,
    labels: Vec<char>,
}

/// Labels of the ellipsis dims, counted from the left of the longest ellipsis.
fn ellipsis_label(i: usize) -> char {
    char::from_u32(0xE000 + i as u32).unwrap_or('\u{E000}')
}

fn parse_subscripts(s: &str, rank: usize, ell: usize) -> R<Vec<char>> {
    let (head, tail) = match s.split_once("...") {
        Some((h, t)) => (h, Some(t)),
        None => (s, None),
    };
    let letters = |p: &str| -> R<Vec<char>> {
        p.chars()
            .map(|c| {
                if c.is_ascii_alphabetic() {
                    Ok(c)
                } else {
                    Err(format!("invalid einsum subscript '{c}'"))
                }
            })
            .collect()
    };
    let mut labels = letters(head)?;
    if let Some(t) = tail {
        let t = letters(t)?;
        let n = rank
            .checked_sub(labels.len() + t.len())
            .ok_or_else(|| format!("subscripts '{s}' for a rank-{rank} operand"))?;
        labels.extend((ell - n..ell).map(ellipsis_label));
        labels.extend(t);
    }
    if labels.len() != rank {
        return Err(format!("subscripts '{s}' for a rank-{rank} operand"));
    }
    Ok(labels)
}

/// Sums the dims of `t` whose labels are not in `keep`.
fn sum_out(em: &mut Emitter, t: Term, keep: &dyn Fn(char) -> bool) -> Term {
    let dims: Vec<usize> = (0..t.labels.len())
        .filter(|&i| !keep(t.labels[i]))
        .collect();
    if dims.is_empty() {
        return t;
    }
    let v = em.sum(t.v, &dims, false);
    let labels = t.labels.into_iter().filter(|&c| keep(c)).collect();
    Term { v, labels }
}

/// Permutes `t` to `order` (a permutation of its labels) and broadcasts each dim to `size`.
fn arrange(em: &mut Emitter, t: &Term, order: &[char], size: &HashMap<char, usize>) -> ValueId {
    let perm: Vec<usize> = order
        .iter()
        .map(|c| t.labels.iter().position(|l| l == c).unwrap_or(0))
        .collect();
    let v = em.permute(t.v, &perm);
    let full: Vec<usize> = order.iter().map(|c| size[c]).collect();
    em.expand(v, &full)
}

/// `einsum(equation, operands)`: labels only one operand has and the output lacks are summed
/// first, then operands are contracted left to right, each pair as a batched matmul
/// `[batch, a, k] @ [batch, k, b]`, and the result permuted to the output's order.
/// Repeated labels within one operand (diagonals) are refused.
pub fn einsum(em: &mut Emitter) -> R<()> {
    let Composite::Einsum { equation } = em.composite()? else {
        return Err("internal: not einsum".into());
    };
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let subs: Vec<&str> = lhs.split(',').collect();
    if subs.len() != em.node.inputs.len() {
        return Err(format!(
            "equation '{equation}' names {} operands, the node has {}",
            subs.len(),
            em.node.inputs.len()
        ));
    }
    // The ellipsis covers the most dims any operand gives it.
    let mut ell = 0;
    for (s, &v) in subs.iter().zip(&em.node.inputs) {
        if s.contains("...") {
            let named = s.replace("...", "").chars().count();
            ell = ell.max(em.ty(v).rank().saturating_sub(named));
        }
    }
    let mut terms = Vec::new();
    let mut size: HashMap<char, usize> = HashMap::new();
    let mut count: HashMap<char, usize> = HashMap::new();
    for (s, &v) in subs.iter().zip(&em.node.inputs) {
        let shape = em.shape(v);
        let labels = parse_subscripts(s, shape.len(), ell)?;
        for (i, &c) in labels.iter().enumerate() {
            if labels[..i].contains(&c) {
                return Err(format!("repeated subscript '{c}' in '{s}' (a diagonal)"));
            }
            let e = size.entry(c).or_insert(shape[i]);
            if *e != shape[i] && *e != 1 && shape[i] != 1 {
                return Err(format!("label '{c}' has sizes {} and {}", *e, shape[i]));
            }
            *e = (*e).max(shape[i]);
            *count.entry(c).or_default() += 1;
        }
        terms.push(Term { v, labels });
    }
    let out: Vec<char> = match &rhs {
        Some(r) => parse_subscripts(
            r,
            r.replace("...", "").chars().count() + if r.contains("...") { ell } else { 0 },
            ell,
        )?,
        None => {
            let mut once: Vec<char> = count
                .iter()
                .filter(|(c, n)| **n == 1 && c.is_ascii_alphabetic())
                .map(|(c, _)| *c)
                .collect();
            once.sort_unstable();
            (0..ell).map(ellipsis_label).chain(once).collect()
        }
    };
    if let Some(c) = out.iter().find(|c| !size.contains_key(c)) {
        return Err(format!("output label '{c}' is in no operand"));
    }
    let mut terms = terms.into_iter();
    let first = terms.next().ok_or("einsum of no operands")?;
    let rest: Vec<Term> = terms.collect();
    // Labels needed after operand i: the output's and those of operands after i.
    let needed_after =
        |i: usize, c: char| out.contains(&c) || rest[i..].iter().any(|t| t.labels.contains(&c));
    let mut acc = sum_out(em, first, &|c| needed_after(0, c));
    for (i, term) in rest.iter().enumerate() {
        let b = Term {
            v: term.v,
            labels: term.labels.clone(),
        };
        let keep_b = |c: char| acc.labels.contains(&c) || needed_after(i + 1, c);
        let b = sum_out(em, b, &keep_b);
        let later = |c: char| needed_after(i + 1, c);
        let batch: Vec<char> = acc
            .labels
            .iter()
            .copied()
            .filter(|c| b.labels.contains(c) && later(*c))
            .collect();
        let contracted: Vec<char> = acc
            .labels
            .iter()
            .copied()
            .filter(|c| b.labels.contains(c) && !later(*c))
            .collect();
        let a_only: Vec<char> = acc
            .labels
            .iter()
            .copied()
            .filter(|c| !b.labels.contains(c))
            .collect();
        let b_only: Vec<char> = b
            .labels
            .iter()
            .copied()
            .filter(|c| !acc.labels.contains(c))
            .collect();
        let prod = |ls: &[char]| ls.iter().map(|c| size[c]).product::<usize>();
        let (nb, na, nk, nn) = (
            prod(&batch),
            prod(&a_only),
            prod(&contracted),
            prod(&b_only),
        );
        let a_order: Vec<char> = batch
            .iter()
            .chain(&a_only)
            .chain(&contracted)
            .copied()
            .collect();
        let b_order: Vec<char> = batch
            .iter()
            .chain(&contracted)
            .chain(&b_only)
            .copied()
            .collect();
        let av = arrange(em, &acc, &a_order, &size);
        let av = em.reshape(av, &[nb, na, nk]);
        let bv = arrange(em, &b, &b_order, &size);
        let bv = em.reshape(bv, &[nb, nk, nn]);
        let m = em.matmul(av, bv)?;
        let labels: Vec<char> = batch
            .iter()
            .chain(&a_only)
            .chain(&b_only)
            .copied()
            .collect();
        let shape: Vec<usize> = labels.iter().map(|c| size[c]).collect();
        let v = em.reshape(m, &shape);
        acc = Term { v, labels };
    }
    let acc = sum_out(em, acc, &|c| out.contains(&c));
    let r = arrange(em, &acc, &out, &size);
    em.bind(0, r)
}
