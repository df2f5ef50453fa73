//! Choosing the next token from logits, with Hugging Face's semantics and in its order:
//! repetition penalty, then temperature, top-k, top-p, min-p, then a draw from the softmax of
//! what is left. Temperature 0 is greedy (argmax after the repetition penalty, as HF's
//! `do_sample=False` applies its logits processors but no warpers).

use crate::error::{Result, TextError};
use crate::rng::Rng;

/// Sampling settings; the defaults are greedy decoding with no penalty.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy; otherwise logits are divided by it.
    pub temperature: f32,
    /// Keep the k most likely tokens (ties with the k-th included); 0 = off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches p; 1 = off.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one; 0 = off.
    pub min_p: f32,
    /// > 1 discourages tokens already in the context (prompt and generated); 1 = off.
    pub repetition_penalty: f32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
        }
    }
}

impl SamplingParams {
    /// Rejects settings outside their domain, naming the option.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(TextError::Invalid(what.to_string()));
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad("--temperature must be a number >= 0");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("--top-p must be in (0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("--min-p must be in [0, 1]");
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return bad("--repetition-penalty must be a number > 0");
        }
        Ok(())
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
}

/// Draws tokens with [`SamplingParams`] from a seeded [`Rng`].
#[derive(Debug, Clone)]
pub struct Sampler {
    pub params: SamplingParams,
    rng: Rng,
}

/// Index of the largest value; the first one on ties (as `torch.argmax`).
pub use npu_runtime::compare::argmax;

impl Sampler {
    pub fn new(params: SamplingParams, seed: u64) -> Sampler {
        Sampler {
            params,
            rng: Rng::new(seed),
        }
    }

    /// The scores after the repetition penalty: over the distinct tokens of `history`, a
    /// positive logit is divided by the penalty and a negative one multiplied (HF's rule).
    fn penalized(&self, logits: &[f32], history: &[u32]) -> Vec<f32> {
        let mut s = logits.to_vec();
        let p = self.params.repetition_penalty;
        if p != 1.0 {
            let mut seen = vec![false; s.len()];
            for &t in history {
                let t = t as usize;
                if t < s.len() && !seen[t] {
                    seen[t] = true;
                    s[t] = if s[t] < 0.0 { s[t] * p } else { s[t] / p };
                }
            }
        }
        s
    }

    /// The probability of every token under the settings (0 for the ones the filters drop),
    /// for a sampling temperature > 0. What [`Sampler::sample`] draws from.
    pub fn distribution(&self, logits: &[f32], history: &[u32]) -> Vec<f64> {
        let p = &self.params;
        let t = if p.temperature > 0.0 {
            f64::from(p.temperature)
        } else {
            1.0
        };
        let mut s: Vec<f64> = self
            .penalized(logits, history)
            .iter()
            .map(|&x| f64::from(x) / t)
            .collect();
        let n = s.len();
        if n == 0 {
            return Vec::new();
        }
        let neg = f64::NEG_INFINITY;
        if p.top_k > 0 && p.top_k < n {
            let mut sorted = s.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            let kth = sorted[p.top_k - 1];
            for x in s.iter_mut() {
                if *x < kth {
                    *x = neg;
                }
            }
        }
        if p.top_p < 1.0 {
            // HF: sort ascending, drop tokens whose cumulative probability is <= 1 - p,
            // always keeping the most likely one.
            let probs = softmax(&s);
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| s[a].total_cmp(&s[b]));
            let limit = 1.0 - f64::from(p.top_p);
            let mut cum = 0.0;
            for (rank, &i) in order.iter().enumerate() {
                cum += probs[i];
                if cum <= limit && rank + 1 < n {
                    s[i] = neg;
                }
            }
        }
        if p.min_p > 0.0 {
            let probs = softmax(&s);
            let top = argmax_f64(&probs);
            let floor = f64::from(p.min_p) * probs[top];
            for (i, x) in s.iter_mut().enumerate() {
                if probs[i] < floor && i != top {
                    *x = neg;
                }
            }
        }
        softmax(&s)
    }

    /// The next token given the logits of the last position and the context so far (for
    /// the repetition penalty).
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        if self.params.is_greedy() {
            if self.params.repetition_penalty == 1.0 {
                return argmax(logits) as u32;
            }
            return argmax(&self.penalized(logits, history)) as u32;
        }
        let probs = self.distribution(logits, history);
        let u = self.rng.next_f64();
        let mut cum = 0.0;
        let mut last = 0;
        for (i, &q) in probs.iter().enumerate() {
            if q > 0.0 {
                cum += q;
                last = i;
                if u < cum {
                    return i as u32;
                }
            }
        }
        // Rounding left the sum a hair under u: the last token that can be drawn.
        last as u32
    }
}

fn argmax_f64(v: &[f64]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// Softmax in f64; -inf entries get probability 0.
fn softmax(s: &[f64]) -> Vec<f64> {
    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = s.iter().map(|&x| (x - m).exp()).collect();
    let z: f64 = e.iter().sum();
    e.into_iter().map(|x| x / z).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(t: f32, k: usize, p: f32, min_p: f32, rep: f32) -> SamplingParams {
        SamplingParams {
            temperature: t,
            top_k: k,
            top_p: p,
            min_p,
            repetition_penalty: rep,
        }
    }

    #[test]
    fn greedy_is_argmax_after_the_penalty() {
        let logits = [1.0, 3.0, 2.9, -1.0];
        let mut s = Sampler::new(SamplingParams::default(), 0);
        assert_eq!(s.sample(&logits, &[]), 1);
        // 3.0 / 1.5 = 2.0 < 2.9: the penalty moves the choice to token 2.
        let mut s = Sampler::new(params(0.0, 0, 1.0, 0.0, 1.5), 0);
        assert_eq!(s.sample(&logits, &[1, 1]), 2);
        // A negative logit is multiplied: -1 * 1.5.
        let sp = Sampler::new(params(1.0, 0, 1.0, 0.0, 1.5), 0);
        let d = sp.distribution(&logits, &[3]);
        let want = softmax(&[1.0, 3.0, 2.9, -1.5]);
        for (a, b) in d.iter().zip(&want) {
            assert!((a - b).abs() < 1e-7);
        }
    }

    #[test]
    fn filters_keep_what_they_should() {
        let logits: Vec<f32> = vec![0.0, 1.0, 2.0, 3.0, 4.0];
        let kept = |p: SamplingParams| -> Vec<usize> {
            let d = Sampler::new(p, 0).distribution(&logits, &[]);
            (0..d.len()).filter(|&i| d[i] > 0.0).collect()
        };
        assert_eq!(kept(params(1.0, 2, 1.0, 0.0, 1.0)), vec![3, 4]);
        // probs ~ [.012 .032 .087 .237 .644]: top-p 0.8 needs tokens 4 and 3.
        assert_eq!(kept(params(1.0, 0, 0.8, 0.0, 1.0)), vec![3, 4]);
        assert_eq!(kept(params(1.0, 0, 0.5, 0.0, 1.0)), vec![4]);
        // min-p 0.1: floor 0.0644; keeps 2 (.087), 3, 4.
        assert_eq!(kept(params(1.0, 0, 1.0, 0.1, 1.0)), vec![2, 3, 4]);
        assert_eq!(kept(params(1.0, 0, 1.0, 1.0, 1.0)), vec![4]);
        // top-p tiny still keeps one token.
        assert_eq!(kept(params(1.0, 0, 1e-6, 0.0, 1.0)), vec![4]);
    }

    #[test]
    fn a_seed_reproduces_the_draws_and_draws_follow_the_distribution() {
        let logits: Vec<f32> = (0..10).map(|i| (i as f32 * 0.37).sin() * 2.0).collect();
        let p = params(0.8, 0, 1.0, 0.0, 1.0);
        let draw = |seed| {
            let mut s = Sampler::new(p.clone(), seed);
            (0..50).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
        let mut s = Sampler::new(p.clone(), 9);
        let want = s.distribution(&logits, &[]);
        let n = 50_000;
        let mut counts = [0usize; 10];
        for _ in 0..n {
            counts[s.sample(&logits, &[]) as usize] += 1;
        }
        let chi2: f64 = counts
            .iter()
            .zip(&want)
            .map(|(&c, &q)| (c as f64 - q * n as f64).powi(2) / (q * n as f64))
            .sum();
        // 9 degrees of freedom: P(chi2 > 27.88) = 0.001.
        assert!(
            chi2 < 27.88,
            "chi2 {chi2}, counts {counts:?}, want {want:?}"
        );
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        assert!(params(-1.0, 0, 1.0, 0.0, 1.0).validate().is_err());
        assert!(params(1.0, 0, 0.0, 0.0, 1.0).validate().is_err());
        assert!(params(1.0, 0, 1.0, 1.5, 1.0).validate().is_err());
        assert!(params(1.0, 0, 1.0, 0.0, 0.0).validate().is_err());
        assert!(params(f32::NAN, 0, 1.0, 0.0, 1.0).validate().is_err());
        assert!(SamplingParams::default().validate().is_ok());
    }
}
