//! `npu generate` and `npu chat`: text in, text out over a prefill and a decode program that
//! share a device-resident KV cache (`npu_text::Session` documents the programs' inputs and
//! the cache layout: a short prompt is left-padded, a long one runs the prefill in chunks).
//!
//! Text mode (`--prompt`, `--prompt-file`, stdin): the text streams to stdout as tokens
//! arrive, followed by one newline; the timings go to stderr; `--json` prints one object
//! instead. Token mode (`--prompt-ids`) prints the timings and `generated: ID,ID,...` on
//! stdout, as it always has.

pub mod args;
pub mod chat;
mod load;

use anyhow::{bail, Context, Result};
use args::{ModelArgs, SamplingArgs};
use npu_text::{
    generate as run_generation, ChatTemplate, GenerateOptions, Generation, Message, Sampler,
};
use std::io::{IsTerminal, Read};
use std::path::PathBuf;

/// Where the prompt comes from.
pub struct PromptArgs {
    pub prompt: Option<String>,
    pub prompt_file: Option<PathBuf>,
    pub prompt_ids: Vec<i64>,
    pub chat: bool,
    pub system: Option<String>,
}

pub struct GenerateArgs {
    pub model: ModelArgs,
    pub sampling: SamplingArgs,
    pub prompt: PromptArgs,
    pub json: bool,
    pub profile: bool,
}

/// The prompt text: `--prompt`, `--prompt-file` (`-` is stdin), or stdin when it is not a
/// terminal.
fn prompt_text(p: &PromptArgs) -> Result<String> {
    let text = match (&p.prompt, &p.prompt_file) {
        (Some(t), None) => t.clone(),
        (None, Some(f)) if f.as_os_str() == "-" => read_stdin()?,
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("cannot read the prompt file {}", f.display()))?,
        (Some(_), Some(_)) => bail!("pass --prompt or --prompt-file, not both"),
        (None, None) if !std::io::stdin().is_terminal() => read_stdin()?,
        (None, None) => {
            bail!("no prompt: pass --prompt TEXT, --prompt-file FILE, or pipe it on stdin")
        }
    };
    if text.is_empty() {
        bail!("the prompt is empty");
    }
    Ok(text)
}

fn read_stdin() -> Result<String> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .context("cannot read the prompt from stdin")?;
    Ok(s)
}

/// Token ids from `--prompt-ids`, each checked to be a valid id.
fn ids(v: &[i64]) -> Result<Vec<u32>> {
    v.iter()
        .map(|&i| u32::try_from(i).with_context(|| format!("token id {i} is not a valid id")))
        .collect()
}

/// Refuses an explicit `--max-new-tokens` that cannot fit after the prompt.
fn check_budget(slots: usize, max_slots: usize, prompt: usize, new: Option<usize>) -> Result<()> {
    if let Some(n) = new {
        if n == 0 {
            bail!("--max-new-tokens must be at least 1");
        }
        // The last new token needs no slot; checked: a huge n must not wrap.
        let last = slots.checked_add(n - 1);
        if !matches!(last, Some(l) if l <= max_slots) {
            bail!(
                "{n} new tokens after a {prompt}-token prompt ({slots} cache slots) exceed \
                 the cache of {max_slots} slots"
            );
        }
    } else if slots > max_slots {
        bail!("the prompt has {prompt} tokens and the cache holds {max_slots}: it does not fit");
    }
    Ok(())
}

/// The chat messages of one turn: the system message (when given) and the user's.
pub fn first_messages(system: Option<&str>, user: &str) -> Vec<Message> {
    let mut m: Vec<Message> = system
        .map(|s| Message::new("system", s))
        .into_iter()
        .collect();
    m.push(Message::new("user", user));
    m
}

pub fn generate(a: GenerateArgs) -> Result<()> {
    a.sampling.validate()?;
    let token_mode = !a.prompt.prompt_ids.is_empty();
    if token_mode && (a.prompt.prompt.is_some() || a.prompt.prompt_file.is_some()) {
        bail!("pass --prompt-ids or a text prompt, not both");
    }
    if token_mode && a.prompt.chat {
        bail!("--chat renders a text prompt: it does not apply to --prompt-ids");
    }
    // Read the prompt before loading, so a missing prompt costs nothing.
    let text = if token_mode {
        None
    } else {
        Some(prompt_text(&a.prompt)?)
    };
    let needs = match (&text, a.prompt.chat) {
        (None, _) => load::Needs::Programs,
        (Some(_), false) => load::Needs::Tokenizer,
        (Some(_), true) => load::Needs::ChatTemplate,
    };
    let mut loaded = load::load(&a.model, needs)?;
    let prompt: Vec<u32> = match &text {
        None => ids(&a.prompt.prompt_ids)?,
        Some(t) => {
            let tk = load::tokenizer(&loaded)?;
            if a.prompt.chat {
                let src = tk
                    .chat_template()
                    .ok_or(npu_text::TextError::NoChatTemplate)?;
                let messages = first_messages(a.prompt.system.as_deref(), t);
                let rendered =
                    ChatTemplate::new(src)?.render(&messages, true, tk.special_tokens())?;
                tk.encode(&rendered, false)?
            } else {
                tk.encode(t, true)?
            }
        }
    };
    if prompt.is_empty() {
        bail!("the prompt has no tokens");
    }
    let s = &loaded.session;
    let slots = s.slots_for_prompt(prompt.len());
    // Token mode keeps its old default of 16 new tokens.
    let max_new = a
        .sampling
        .max_new_tokens
        .or(if token_mode { Some(16) } else { None });
    check_budget(slots, s.cache_len(), prompt.len(), max_new)?;
    let seed = a.sampling.seed();
    let opts = GenerateOptions {
        max_new_tokens: max_new,
        stop: a.sampling.stop.clone(),
        eos: loaded
            .tokenizer
            .as_ref()
            .map(|t| t.eos_token_ids().to_vec())
            .unwrap_or_default(),
    };
    let mut sampler = Sampler::new(a.sampling.params(), seed);
    loaded.session.set_profiling(a.profile);
    let stream = !token_mode && !a.json;
    let mut sink = |piece: &str| -> std::io::Result<()> {
        if stream {
            crate::out::write(format_args!("{piece}"));
        }
        Ok(())
    };
    let tk = loaded.tokenizer.as_ref();
    let g = run_generation(
        &mut loaded.session,
        tk,
        &prompt,
        &opts,
        &mut sampler,
        &mut sink,
    )?;
    if stream {
        say!();
    }
    if a.json {
        say!("{}", serde_json::to_string(&json(&g, &loaded, seed))?);
    } else if token_mode {
        report_tokens(&g, &loaded, &a.model.backend);
    }
    if !token_mode || a.json {
        eprintln!("{}", stats(&g, &loaded, seed, &a.sampling));
    }
    if a.profile {
        let (pre, dec) = loaded.session.profile();
        crate::profile::print("prefill", &pre, 10);
        crate::profile::print("decode", &dec, 10);
    }
    Ok(())
}

/// The timings line (stderr).
pub fn stats(g: &Generation, l: &load::Loaded, seed: u64, s: &SamplingArgs) -> String {
    let mut line = format!(
        "prompt: {} tokens in {:.1} ms ({:.1} tokens/s); decode: {} tokens in {:.1} ms ({:.1} tokens/s); {} new tokens, finish: {}; load {:.2} s",
        g.prompt_tokens,
        g.prefill_s * 1e3,
        g.prompt_tokens_per_s(),
        g.decode_steps,
        g.decode_s * 1e3,
        g.decode_tokens_per_s(),
        g.tokens.len(),
        g.finish.as_str(),
        l.load_s
    );
    if !s.params().is_greedy() {
        line += &format!("; seed {seed}");
    }
    line
}

fn json(g: &Generation, l: &load::Loaded, seed: u64) -> serde_json::Value {
    serde_json::json!({
        "text": g.text,
        "tokens": g.tokens,
        "prompt_tokens": g.prompt_tokens,
        "finish_reason": g.finish.as_str(),
        "seed": seed,
        "timings": {
            "load_s": l.load_s,
            "prefill_s": g.prefill_s,
            "decode_s": g.decode_s,
            "decode_model_s": g.decode_model_s,
            "decode_steps": g.decode_steps,
            "prompt_tokens_per_s": g.prompt_tokens_per_s(),
            "decode_tokens_per_s": g.decode_tokens_per_s(),
        },
    })
}

/// Token mode's report on stdout (the format scripts and tests read).
fn report_tokens(g: &Generation, l: &load::Loaded, backend: &str) {
    let s = &l.session;
    let pad = s.slots_for_prompt(g.prompt_tokens) - g.prompt_tokens;
    say!(
        "prompt: {} tokens (prefill length {}, {pad} left-padded), cache {} slots, backend {backend}",
        g.prompt_tokens,
        s.prefill_len(),
        s.cache_len()
    );
    say!("load: {:.1} ms", l.load_s * 1e3);
    say!(
        "prefill: {:.1} ms ({:.1} tokens/s)",
        g.prefill_s * 1e3,
        g.prompt_tokens_per_s()
    );
    if g.decode_steps > 0 {
        say!(
            "decode: {} tokens in {:.1} ms ({:.2} ms/token, {:.1} tokens/s)",
            g.decode_steps,
            g.decode_s * 1e3,
            g.decode_s * 1e3 / g.decode_steps as f64,
            g.decode_tokens_per_s()
        );
    }
    let text: Vec<String> = g.tokens.iter().map(|t| t.to_string()).collect();
    say!("generated: {}", text.join(","));
}
