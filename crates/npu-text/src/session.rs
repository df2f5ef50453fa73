//! A causal LM session: a prefill and a decode program prepared on one backend, sharing one
//! device state that holds the KV cache, and the tokens that cache holds.
//!
//! The programs' convention (the export tool's): `input_ids` [1,S], `attention_mask`
//! [1,1,S,MAX] additive (0 attend, the dtype's lowest value masked), `position_ids` [1,S],
//! `cache_position` [S] (the cache slots written), then the caches; the first output that is
//! not a cache is the logits of the last position. The decode program is the same with S = 1.
//!
//! Cache layout (the invariant every method keeps): slots `0..pad` are padding, slots
//! `pad..pad+len` hold [`Session::tokens`] at positions `0..len`; slots past that are stale
//! and masked for every query. A padding slot holds token 0 at position 0 and attends only to
//! itself (a fully masked row would be NaN); real tokens attend to slots `pad..=own`.
//!
//! - The first prompt, when it has at most S tokens, is LEFT-padded into one prefill
//!   (`pad = S - P`), so that the prefill's last-position logits are the last token's.
//! - Anything longer runs the prefill over chunks of S slots, the last chunk ending at the
//!   last new token and overlapping the previous one (recomputing slots it already wrote, with
//!   the same tokens and positions) instead of padding, so no cache slot is wasted.
//! - One new token runs the decode program.
//! - [`Session::truncate`] forgets tokens from the end (slots become stale), so a chat can
//!   keep the longest common prefix of two turns.

use crate::error::{Result, TextError};
use npu_compiler::program::IoTensor;
use npu_compiler::Program;
use npu_ir::DType;
use npu_runtime::{DeviceState, Executable, HostTensor, StepTime};

/// What generation needs from a model: extend the context, read it back, know the room
/// left. [`Session`] is the real one; tests use fakes.
pub trait LanguageModel {
    /// Appends `tokens` (at least one) to the context; returns the logits after the last.
    fn extend(&mut self, tokens: &[u32]) -> Result<Vec<f32>>;
    /// The tokens the context holds.
    fn tokens(&self) -> &[u32];
    /// How many more tokens fit after the current ones.
    fn room(&self) -> usize;
}

/// One program's fixed inputs.
struct Inputs {
    ids: IoTensor,
    mask: IoTensor,
    pos: Option<IoTensor>,
    cpos: Option<IoTensor>,
}

fn find<'a>(p: &'a Program, name: &str) -> Option<&'a IoTensor> {
    p.inputs.iter().find(|i| i.name == name)
}

fn inputs(p: &Program, what: &str, rows: Option<usize>) -> Result<(Inputs, usize, usize)> {
    let bad = |message: String| TextError::Program {
        program: what.to_string(),
        message,
    };
    let ids = find(p, "input_ids").ok_or_else(|| bad("has no input 'input_ids'".into()))?;
    let mask =
        find(p, "attention_mask").ok_or_else(|| bad("has no input 'attention_mask'".into()))?;
    let s = match ids.shape.as_slice() {
        [1, s] if *s > 0 => *s,
        other => return Err(bad(format!("input_ids is {other:?}, expected [1, S]"))),
    };
    let max = match mask.shape.as_slice() {
        [1, 1, r, m] if *r == s && *m >= s => *m,
        other => {
            return Err(bad(format!(
                "attention_mask is {other:?}, expected [1, 1, {s}, MAX]"
            )))
        }
    };
    if let Some(r) = rows {
        if s != r {
            return Err(bad(format!("takes {s} tokens a run, expected {r}")));
        }
    }
    let i = Inputs {
        ids: ids.clone(),
        mask: mask.clone(),
        pos: find(p, "position_ids").cloned(),
        cpos: find(p, "cache_position").cloned(),
    };
    Ok((i, s, max))
}

/// The vocabulary: the last dimension of the first output that is not a cache.
fn vocab(p: &Program, what: &str) -> Result<usize> {
    p.outputs
        .iter()
        .find(|o| o.donates_input.is_none())
        .and_then(|o| o.shape.last().copied())
        .filter(|&v| v > 0)
        .ok_or_else(|| TextError::Program {
            program: what.to_string(),
            message: "has no logits output".into(),
        })
}

fn masked_value(dt: DType) -> f32 {
    match dt {
        DType::F16 => -65504.0,
        DType::BF16 => -3.389_531_4e38,
        _ => f32::MIN,
    }
}

fn ints(io: &IoTensor, v: &[i64]) -> Result<HostTensor> {
    HostTensor::from_i64(io.shape.clone(), v)
        .cast(io.dtype)
        .map_err(|e| TextError::runtime(format!("input '{}'", io.name), e))
}

/// A prefill + decode pair over one KV cache.
pub struct Session {
    prefill: Box<dyn Executable>,
    decode: Box<dyn Executable>,
    state: Box<dyn DeviceState>,
    pre: Inputs,
    dec: Inputs,
    s: usize,
    max: usize,
    vocab: usize,
    pad: usize,
    tokens: Vec<u32>,
    runs: (usize, usize),
}

impl Session {
    /// Checks that the two programs follow the convention and agree (cache length,
    /// vocabulary); the prefill program's state is shared with the decode program.
    pub fn new(prefill: Box<dyn Executable>, decode: Box<dyn Executable>) -> Result<Session> {
        let (pre, s, max) = inputs(prefill.program(), "the prefill program", None)?;
        let (dec, _, dmax) = inputs(decode.program(), "the decode program", Some(1))?;
        if dec.pos.is_none() || dec.cpos.is_none() {
            return Err(TextError::Program {
                program: "the decode program".into(),
                message: "must take 'position_ids' and 'cache_position'".into(),
            });
        }
        if dmax != max {
            return Err(TextError::Program {
                program: "the decode program".into(),
                message: format!("has a cache of {dmax} slots, the prefill program {max}"),
            });
        }
        let v = vocab(prefill.program(), "the prefill program")?;
        let dv = vocab(decode.program(), "the decode program")?;
        if dv != v {
            return Err(TextError::Program {
                program: "the decode program".into(),
                message: format!("has {dv} logits, the prefill program {v}"),
            });
        }
        let vocab = v;
        let state = prefill.new_state();
        Ok(Session {
            prefill,
            decode,
            state,
            pre,
            dec,
            s,
            max,
            vocab,
            pad: 0,
            tokens: Vec::new(),
            runs: (0, 0),
        })
    }

    /// Tokens a prefill run takes (S).
    pub fn prefill_len(&self) -> usize {
        self.s
    }

    /// Cache slots (MAX).
    pub fn cache_len(&self) -> usize {
        self.max
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    /// Slots taken (padding included).
    pub fn used_slots(&self) -> usize {
        self.pad + self.tokens.len()
    }

    /// Slots a prompt of `p` tokens takes in an empty cache.
    pub fn slots_for_prompt(&self, p: usize) -> usize {
        p.max(self.s)
    }

    /// Whether prompts longer than S can run in chunks (the prefill takes positions).
    pub fn can_chunk(&self) -> bool {
        self.pre.pos.is_some() && self.pre.cpos.is_some()
    }

    /// (prefill runs, decode runs) so far.
    pub fn runs(&self) -> (usize, usize) {
        self.runs
    }

    /// Forgets every token after the first `n`.
    pub fn truncate(&mut self, n: usize) {
        self.tokens.truncate(n);
        if self.tokens.is_empty() {
            self.pad = 0;
        }
    }

    /// Forgets everything (the cache content is stale, hence never read).
    pub fn reset(&mut self) {
        self.truncate(0);
    }

    pub fn set_profiling(&mut self, on: bool) {
        self.prefill.set_profiling(on);
        self.decode.set_profiling(on);
    }

    /// Per-step times of (prefill, decode) while profiling was on.
    pub fn profile(&self) -> (Vec<StepTime>, Vec<StepTime>) {
        (self.prefill.profile(), self.decode.profile())
    }

    pub fn programs(&self) -> (&Program, &Program) {
        (self.prefill.program(), self.decode.program())
    }

    fn slot_token(&self, slot: usize) -> i64 {
        if slot < self.pad {
            0
        } else {
            i64::from(self.tokens[slot - self.pad])
        }
    }

    fn mask(&self, io: &IoTensor, first: usize, rows: usize) -> HostTensor {
        let max = self.max;
        let mut v = vec![masked_value(io.dtype); rows * max];
        for r in 0..rows {
            let slot = first + r;
            let row = &mut v[r * max..(r + 1) * max];
            if slot < self.pad {
                row[slot] = 0.0;
            } else {
                row[self.pad..=slot].fill(0.0);
            }
        }
        HostTensor::from_f32_as(io.dtype, io.shape.clone(), &v)
    }

    /// Runs the prefill program over slots `first..first+S`.
    fn run_prefill(&mut self, first: usize) -> Result<Vec<f32>> {
        let s = self.s;
        let ids: Vec<i64> = (first..first + s).map(|j| self.slot_token(j)).collect();
        let pos: Vec<i64> = (first..first + s)
            .map(|j| j.saturating_sub(self.pad) as i64)
            .collect();
        let slots: Vec<i64> = (first..first + s).map(|j| j as i64).collect();
        let mut named = vec![
            ("input_ids", ints(&self.pre.ids, &ids)?),
            ("attention_mask", self.mask(&self.pre.mask, first, s)),
        ];
        if let Some(io) = &self.pre.pos {
            named.push(("position_ids", ints(io, &pos)?));
        }
        if let Some(io) = &self.pre.cpos {
            named.push(("cache_position", ints(io, &slots)?));
        }
        self.runs.0 += 1;
        let what = format!("prefill of cache slots {first}..{}", first + s);
        run(
            self.prefill.as_mut(),
            self.state.as_mut(),
            &named,
            self.vocab,
            &what,
        )
    }

    /// Runs the decode program on the token in `slot`.
    fn run_decode(&mut self, slot: usize) -> Result<Vec<f32>> {
        let (Some(pos_io), Some(cpos_io)) = (&self.dec.pos, &self.dec.cpos) else {
            unreachable!("checked in Session::new")
        };
        let named = vec![
            ("input_ids", ints(&self.dec.ids, &[self.slot_token(slot)])?),
            ("attention_mask", self.mask(&self.dec.mask, slot, 1)),
            ("position_ids", ints(pos_io, &[(slot - self.pad) as i64])?),
            ("cache_position", ints(cpos_io, &[slot as i64])?),
        ];
        self.runs.1 += 1;
        let what = format!("decode of cache slot {slot}");
        run(
            self.decode.as_mut(),
            self.state.as_mut(),
            &named,
            self.vocab,
            &what,
        )
    }

    fn extend_inner(&mut self, new: &[u32], before: usize) -> Result<Vec<f32>> {
        let s = self.s;
        if before == 0 && new.len() <= s {
            self.pad = s - new.len();
            self.tokens.extend_from_slice(new);
            return self.run_prefill(0);
        }
        self.tokens.extend_from_slice(new);
        let end = self.pad + self.tokens.len();
        let start = end - new.len();
        if new.len() > 1 && self.can_chunk() && end >= s {
            let mut first = start;
            while first + s < end {
                self.run_prefill(first)?;
                first += s;
            }
            return self.run_prefill(end - s);
        }
        if before == 0 {
            return Err(TextError::Invalid(format!(
                "the prompt has {} tokens and the prefill program takes {s}; it takes no \
                 positions (position_ids, cache_position), so it cannot run in chunks",
                new.len()
            )));
        }
        // A few tokens after a truncation that cannot fill a prefill chunk: one by one.
        let mut logits = Vec::new();
        for slot in start..end {
            logits = self.run_decode(slot)?;
        }
        Ok(logits)
    }
}

fn run(
    exe: &mut dyn Executable,
    state: &mut dyn DeviceState,
    named: &[(&str, HostTensor)],
    vocab: usize,
    what: &str,
) -> Result<Vec<f32>> {
    let refs: Vec<(&str, &HostTensor)> = named.iter().map(|(n, t)| (*n, t)).collect();
    let out = exe
        .run(&refs, state)
        .map_err(|e| TextError::runtime(what, e))?;
    let mut logits = out.first().map(|(_, t)| t.to_f32_vec()).unwrap_or_default();
    if logits.len() < vocab {
        return Err(TextError::Program {
            program: what.to_string(),
            message: format!("returned {} logits, expected {vocab}", logits.len()),
        });
    }
    // the last position's logits, in place
    logits.drain(..logits.len() - vocab);
    Ok(logits)
}

impl LanguageModel for Session {
    fn extend(&mut self, new: &[u32]) -> Result<Vec<f32>> {
        if new.is_empty() {
            return Err(TextError::Invalid("nothing to run: no tokens".into()));
        }
        if let Some(&id) = new.iter().find(|&&t| t as usize >= self.vocab) {
            return Err(TextError::TokenOutOfRange {
                id,
                vocab: self.vocab,
            });
        }
        let before = self.tokens.len();
        let needed = if before == 0 {
            self.slots_for_prompt(new.len())
        } else {
            self.pad + before + new.len()
        };
        if needed > self.max {
            return Err(TextError::CacheFull {
                needed,
                max: self.max,
            });
        }
        let pad = self.pad;
        let r = self.extend_inner(new, before);
        if r.is_err() {
            // The cache past `before` is stale whatever ran: forget those tokens.
            self.tokens.truncate(before);
            self.pad = if before == 0 { 0 } else { pad };
        }
        r
    }

    fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    fn room(&self) -> usize {
        if self.tokens.is_empty() {
            self.max
        } else {
            self.max - self.used_slots()
        }
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
