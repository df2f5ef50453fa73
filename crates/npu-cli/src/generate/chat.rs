//! `npu chat`: an interactive conversation. Each turn renders the whole conversation with
//! the chat template and tokenizes it; the KV cache keeps the longest prefix it shares with
//! what the cache already holds (the earlier turns), and only the rest is prefilled. `/reset`
//! starts over, `/exit` (or end of input) ends; a conversation that outgrows the cache is
//! told so, and `/reset` frees it.

use super::args::{ModelArgs, SamplingArgs};
use super::{load, stats};
use anyhow::{Context, Result};
use npu_text::{
    generate as run_generation, ChatTemplate, Finish, GenerateOptions, LanguageModel, Message,
    Sampler, TextError,
};
use std::io::{BufRead, IsTerminal, Write};

pub struct ChatArgs {
    pub model: ModelArgs,
    pub sampling: SamplingArgs,
    pub system: Option<String>,
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

pub fn chat(a: ChatArgs) -> Result<()> {
    a.sampling.validate()?;
    let mut loaded = load::load(&a.model, load::Needs::ChatTemplate)?;
    let tk = load::tokenizer(&loaded)?;
    let template = ChatTemplate::new(tk.chat_template().ok_or(TextError::NoChatTemplate)?)?;
    let special = tk.special_tokens().clone();
    let eos = tk.eos_token_ids().to_vec();
    let seed = a.sampling.seed();
    let mut sampler = Sampler::new(a.sampling.params(), seed);
    let opts = GenerateOptions {
        max_new_tokens: a.sampling.max_new_tokens,
        stop: a.sampling.stop.clone(),
        eos,
    };
    let system: Vec<Message> = a.system.iter().map(|s| Message::new("system", s)).collect();
    let mut messages = system.clone();
    let interactive = std::io::stdin().is_terminal();
    let max = loaded.session.cache_len();
    if interactive {
        eprintln!(
            "chat with {} ({max} cache slots); /reset starts over, /exit ends",
            a.model
                .model
                .as_ref()
                .map_or("the model".into(), |d| d.display().to_string())
        );
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        if interactive {
            eprint!("> ");
            let _ = std::io::stderr().flush();
        }
        let Some(line) = lines.next() else { break };
        let line = line.context("cannot read a message from stdin")?;
        let input = line.trim_end_matches(['\r', '\n']);
        match input.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                loaded.session.reset();
                messages = system.clone();
                eprintln!("[conversation reset]");
                continue;
            }
            cmd if cmd.starts_with('/') => {
                eprintln!("[unknown command {cmd}: /reset starts over, /exit ends]");
                continue;
            }
            _ => {}
        }
        messages.push(Message::new("user", input));
        // The field, not the whole `loaded`: the session is borrowed mutably below.
        let tk = loaded.tokenizer.as_ref().context("no tokenizer")?;
        let ids = tk.encode(&template.render(&messages, true, &special)?, false)?;
        if ids.is_empty() {
            eprintln!("[the chat template rendered nothing for this conversation]");
            messages.pop();
            continue;
        }
        let s = &mut loaded.session;
        // Keep what the cache shares with this turn's prompt; at least one token must run
        // to give the next token's logits.
        let keep = common_prefix(s.tokens(), &ids).min(ids.len() - 1);
        s.truncate(keep);
        let mut sink = |piece: &str| -> std::io::Result<()> {
            crate::out::write(format_args!("{piece}"));
            Ok(())
        };
        let result = run_generation(s, Some(tk), &ids[keep..], &opts, &mut sampler, &mut sink);
        let g = match result {
            Ok(g) => g,
            Err(TextError::CacheFull { needed, max }) => {
                eprintln!("[the conversation needs {needed} cache slots and the KV cache holds {max}: /reset to start over]");
                messages.pop();
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        say!();
        if g.finish == Finish::CacheFull {
            eprintln!("[the KV cache is full ({max} slots): the reply was cut; /reset to start a new conversation]");
        }
        if interactive {
            eprintln!("[{}]", stats(&g, &loaded, seed, &a.sampling));
        }
        messages.push(Message::new("assistant", &g.text));
    }
    Ok(())
}
