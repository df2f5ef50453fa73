//! Linear algebra onto `matmul` + views: addmv/addr/baddbmm, mv/dot/outer, einsum (pairwise
//! contractions as batched matmuls), tensordot, addbmm.

use super::emit::{dim, Emitter, R};
use npu_ir::{Composite, Op, ValueId};
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

/// `tensordot(a, b, dims_a, dims_b)`: the contracted dims of `a` moved last and those of
/// `b` first, both flattened to matrices, one matmul, the free dims restored.
pub fn tensordot(em: &mut Emitter) -> R<()> {
    let Composite::Tensordot { dims_a, dims_b } = em.composite()? else {
        return Err("internal: not tensordot".into());
    };
    let (mut a, mut b) = (em.input(0)?, em.input(1)?);
    let (sa, sb) = (em.shape(a), em.shape(b));
    if sa.is_empty() || sb.is_empty() {
        // `inner` with a 0-d operand is a product
        let r = em.mul(a, b)?;
        return em.bind(0, r);
    }
    let norm = |dims: &[i64], rank: usize| -> R<Vec<usize>> {
        dims.iter().map(|&d| dim(d, rank)).collect()
    };
    let (ca, cb) = (norm(dims_a, sa.len())?, norm(dims_b, sb.len())?);
    if ca.len() != cb.len() {
        return Err(format!(
            "contracting dims {dims_a:?} of {sa:?} with {dims_b:?} of {sb:?}"
        ));
    }
    // A size-1 dim contracts with any size, as ATen broadcasts it: the other operand is
    // summed over its dim first.
    for (&i, &j) in ca.iter().zip(&cb) {
        match (sa[i], sb[j]) {
            (x, y) if x == y => {}
            (_, 1) => a = em.sum(a, &[i], true),
            (1, _) => b = em.sum(b, &[j], true),
            _ => {
                return Err(format!(
                    "contracting dims {dims_a:?} of {sa:?} with {dims_b:?} of {sb:?}"
                ))
            }
        }
    }
    let (sa, sb) = (em.shape(a), em.shape(b));
    let free_a: Vec<usize> = (0..sa.len()).filter(|d| !ca.contains(d)).collect();
    let free_b: Vec<usize> = (0..sb.len()).filter(|d| !cb.contains(d)).collect();
    let k: usize = ca.iter().map(|&d| sa[d]).product();
    let m: usize = free_a.iter().map(|&d| sa[d]).product();
    let n: usize = free_b.iter().map(|&d| sb[d]).product();
    let pa: Vec<usize> = free_a.iter().chain(&ca).copied().collect();
    let pb: Vec<usize> = cb.iter().chain(&free_b).copied().collect();
    let at = em.permute(a, &pa);
    let am = em.reshape(at, &[m, k]);
    let bt = em.permute(b, &pb);
    let bm = em.reshape(bt, &[k, n]);
    let r = em.matmul(am, bm)?;
    let out = em.shape(em.output(0)?);
    let r = em.reshape(r, &out);
    em.bind(0, r)
}

/// `addbmm(x, b1 [B, n, m], b2 [B, m, p])`: the batch folded into the contraction,
/// `[n, B*m] @ [B*m, p]`, then `beta * x + alpha * that`.
pub fn addbmm(em: &mut Emitter) -> R<()> {
    let &Composite::Addbmm { beta, alpha } = em.composite()? else {
        return Err("internal: not addbmm".into());
    };
    let (x, b1, b2) = (em.input(0)?, em.input(1)?, em.input(2)?);
    let (s1, s2) = (em.shape(b1), em.shape(b2));
    let (&[bb, n, m], &[bb2, m2, p]) = (s1.as_slice(), s2.as_slice()) else {
        return Err(format!("addbmm of {s1:?} and {s2:?}"));
    };
    if bb != bb2 || m != m2 {
        return Err(format!("addbmm of {s1:?} and {s2:?}"));
    }
    let t = em.transpose(b1, 0, 1);
    let a = em.reshape(t, &[n, bb * m]);
    let b = em.reshape(b2, &[bb * m, p]);
    let mm = em.matmul(a, b)?;
    let r = beta_alpha(em, x, mm, beta, alpha)?;
    let out = em.shape(em.output(0)?);
    let r = em.expand(r, &out);
    em.bind(0, r)
}
