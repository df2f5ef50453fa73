//! The generation loop: prefill the prompt, then sample and feed one token at a time until
//! an end-of-sequence token, a stop string, the token budget or the end of the cache,
//! streaming the text as it becomes final.

use crate::error::{Result, TextError};
use crate::sampling::Sampler;
use crate::session::LanguageModel;
use crate::stream::{StopStrings, TextStream};
use crate::tokenizer::TextTokenizer;
use std::time::Instant;

/// What ends generation besides the model.
#[derive(Debug, Clone, Default)]
pub struct GenerateOptions {
    /// At most this many new tokens; `None`: until EOS, a stop string or a full cache.
    pub max_new_tokens: Option<usize>,
    /// Text that ends generation; it and what follows are cut from the output.
    pub stop: Vec<String>,
    /// Token ids that end generation (not part of the text).
    pub eos: Vec<u32>,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-sequence token.
    Eos,
    /// A stop string.
    Stop,
    /// `max_new_tokens`.
    Length,
    /// The KV cache has no slot for the next token.
    CacheFull,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Eos => "eos",
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::CacheFull => "cache_full",
        }
    }
}

/// The outcome of one generation.
#[derive(Debug, Clone)]
pub struct Generation {
    /// Every sampled token, an ending EOS included.
    pub tokens: Vec<u32>,
    /// The streamed text (special tokens skipped, cut at a stop string); empty without a
    /// tokenizer.
    pub text: String,
    pub finish: Finish,
    pub prompt_tokens: usize,
    /// Seconds of the prompt's prefill (up to the first token's logits).
    pub prefill_s: f64,
    /// Seconds of the decode steps after it.
    pub decode_s: f64,
    /// The part of `decode_s` spent running the model; the rest is sampling, detokenizing,
    /// stop strings and the sink.
    pub decode_model_s: f64,
    /// Decode runs (tokens fed back after the first).
    pub decode_steps: usize,
}

impl Generation {
    pub fn prompt_tokens_per_s(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill_s.max(1e-12)
    }

    pub fn decode_tokens_per_s(&self) -> f64 {
        if self.decode_steps == 0 {
            0.0
        } else {
            self.decode_steps as f64 / self.decode_s.max(1e-12)
        }
    }
}

/// Runs `prompt` through `model` and generates. `sink` receives the text as it becomes
/// final (never half a character, never past a stop string); its error ends generation.
pub fn generate(
    model: &mut dyn LanguageModel,
    tokenizer: Option<&TextTokenizer>,
    prompt: &[u32],
    opts: &GenerateOptions,
    sampler: &mut Sampler,
    sink: &mut dyn FnMut(&str) -> std::io::Result<()>,
) -> Result<Generation> {
    if prompt.is_empty() {
        return Err(TextError::Invalid("the prompt has no tokens".into()));
    }
    if opts.max_new_tokens == Some(0) {
        return Err(TextError::Invalid(
            "--max-new-tokens must be at least 1".into(),
        ));
    }
    if opts.stop.iter().any(String::is_empty) {
        return Err(TextError::Invalid("a --stop string is empty".into()));
    }
    if tokenizer.is_none() && !opts.stop.is_empty() {
        return Err(TextError::Invalid(
            "--stop needs a tokenizer to see the text".into(),
        ));
    }
    let mut emit = |s: &str, text: &mut String| -> Result<()> {
        if !s.is_empty() {
            text.push_str(s);
            sink(s).map_err(|e| TextError::Sink(Box::new(e)))?;
        }
        Ok(())
    };
    let t0 = Instant::now();
    let mut logits = model.extend(prompt)?;
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut stream = TextStream::new();
    let mut stops = StopStrings::new(opts.stop.clone());
    let mut text = String::new();
    let mut tokens = Vec::new();
    let mut decode_steps = 0;
    let mut decode_model_s = 0.0;
    let finish = loop {
        let tok = sampler.sample(&logits, model.tokens());
        tokens.push(tok);
        if opts.eos.contains(&tok) {
            break Finish::Eos;
        }
        if let Some(t) = tokenizer {
            let piece = stream.push(t, tok)?;
            emit(&stops.push(&piece), &mut text)?;
            if stops.stopped() {
                break Finish::Stop;
            }
        }
        if opts.max_new_tokens.is_some_and(|m| tokens.len() >= m) {
            break Finish::Length;
        }
        if model.room() == 0 {
            break Finish::CacheFull;
        }
        let t = Instant::now();
        logits = model.extend(&[tok])?;
        decode_model_s += t.elapsed().as_secs_f64();
        decode_steps += 1;
    };
    if let Some(t) = tokenizer {
        if finish != Finish::Stop {
            let rest = stream.finish(t)?;
            let mut out = stops.push(&rest);
            if !stops.stopped() {
                out.push_str(&stops.finish());
            }
            emit(&out, &mut text)?;
        }
    }
    let finish = if finish != Finish::Stop && stops.stopped() {
        Finish::Stop
    } else {
        finish
    };
    Ok(Generation {
        tokens,
        text,
        finish,
        prompt_tokens: prompt.len(),
        prefill_s,
        decode_s: t1.elapsed().as_secs_f64(),
        decode_model_s,
        decode_steps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::SamplingParams;

    /// A model whose next token is scripted: the logits put all mass on `script[len]`.
    struct Scripted {
        script: Vec<u32>,
        ctx: Vec<u32>,
        cap: usize,
        vocab: usize,
    }

    impl LanguageModel for Scripted {
        fn extend(&mut self, t: &[u32]) -> Result<Vec<f32>> {
            if self.ctx.len() + t.len() > self.cap {
                return Err(TextError::CacheFull {
                    needed: self.ctx.len() + t.len(),
                    max: self.cap,
                });
            }
            self.ctx.extend_from_slice(t);
            let mut l = vec![0.0; self.vocab];
            let next = self.script.get(self.ctx.len()).copied().unwrap_or(1);
            l[next as usize] = 10.0;
            Ok(l)
        }
        fn tokens(&self) -> &[u32] {
            &self.ctx
        }
        fn room(&self) -> usize {
            self.cap - self.ctx.len()
        }
    }

    fn run(script: &[u32], cap: usize, opts: GenerateOptions) -> (Generation, Vec<u32>) {
        let mut m = Scripted {
            script: script.to_vec(),
            ctx: Vec::new(),
            cap,
            vocab: 8,
        };
        let mut s = Sampler::new(SamplingParams::default(), 0);
        let g = generate(&mut m, None, &[5, 5], &opts, &mut s, &mut |_| Ok(())).unwrap();
        (g, m.ctx)
    }

    #[test]
    fn ends_at_eos_length_or_a_full_cache() {
        // Context [5,5], then the script says 3, 4, 2, ...
        let script = [0, 0, 3, 4, 2, 6, 6];
        let eos = GenerateOptions {
            eos: vec![2],
            ..Default::default()
        };
        let (g, ctx) = run(&script, 16, eos);
        assert_eq!(
            (g.tokens.as_slice(), g.finish),
            (&[3, 4, 2][..], Finish::Eos)
        );
        assert_eq!(ctx, [5, 5, 3, 4], "the EOS token is not fed back");
        assert_eq!(g.decode_steps, 2);
        assert!(
            g.decode_model_s > 0.0 && g.decode_model_s <= g.decode_s,
            "the model's share of the decode time: {} of {}",
            g.decode_model_s,
            g.decode_s
        );
        let len = GenerateOptions {
            max_new_tokens: Some(2),
            ..Default::default()
        };
        let (g, ctx) = run(&script, 16, len);
        assert_eq!(
            (g.tokens.as_slice(), g.finish),
            (&[3, 4][..], Finish::Length)
        );
        assert_eq!(ctx.len(), 3, "the last token needs no decode run");
        // 4 slots: the prompt takes 2, two more fed, and a last token sampled.
        let (g, _) = run(&script, 4, GenerateOptions::default());
        assert_eq!(
            (g.tokens.as_slice(), g.finish),
            (&[3, 4, 2][..], Finish::CacheFull)
        );
    }

    #[test]
    fn bad_options_are_refused() {
        let mut m = Scripted {
            script: vec![],
            ctx: vec![],
            cap: 4,
            vocab: 4,
        };
        let mut s = Sampler::new(SamplingParams::default(), 0);
        let mut sink = |_: &str| Ok(());
        let mut go = |p: &[u32], o: GenerateOptions| {
            generate(&mut m, None, p, &o, &mut s, &mut sink)
                .unwrap_err()
                .to_string()
        };
        assert!(go(&[], GenerateOptions::default()).contains("no tokens"));
        let zero = GenerateOptions {
            max_new_tokens: Some(0),
            ..Default::default()
        };
        assert!(go(&[1], zero).contains("at least 1"));
        let stop = GenerateOptions {
            stop: vec!["x".into()],
            ..Default::default()
        };
        assert!(go(&[1], stop).contains("tokenizer"));
    }
}
