//! Loading a model for generation: find the programs (compiling IR on first use into the
//! cache), prepare both on the backend from one weight file, load the tokenizer; with a
//! progress bar on stderr when it is a terminal.

use super::args::ModelArgs;
use crate::backends::backend_by_name;
use crate::run::open_weights;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use npu_compiler::{target::Target, CompileOptions};
use npu_text::{load_program, GraphFile, LoadEvent, ModelDir, Session, TextTokenizer};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A loaded model.
pub struct Loaded {
    pub session: Session,
    pub tokenizer: Option<TextTokenizer>,
    pub load_s: f64,
}

fn graph_file(p: &Path) -> GraphFile {
    if p.extension().is_some_and(|e| e == "npubin") {
        GraphFile::Program(p.to_path_buf())
    } else {
        GraphFile::Ir(p.to_path_buf())
    }
}

/// Names this build of `npu`, so that a cached program is never reused by another compiler.
fn compiler_salt() -> String {
    let exe = std::env::current_exe()
        .and_then(std::fs::metadata)
        .map(|m| {
            let t = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            format!("{}:{t}", m.len())
        })
        .unwrap_or_default();
    format!("npu {} {exe}", env!("CARGO_PKG_VERSION"))
}

fn progress(steps: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::hidden());
    }
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] {bar:24} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// What the command cannot do without: checked before anything is compiled or loaded.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
pub enum Needs {
    Programs,
    Tokenizer,
    ChatTemplate,
}

pub fn load(m: &ModelArgs, needs: Needs) -> Result<Loaded> {
    let dir = match &m.model {
        Some(d) => Some(ModelDir::open(d)?),
        None => None,
    };
    let pick = |given: &Option<PathBuf>, from_dir: Option<GraphFile>, what: &str| match (
        given, from_dir,
    ) {
        (Some(p), _) => Ok(graph_file(p)),
        (None, Some(g)) => Ok(g),
        (None, None) => bail!("pass MODEL_DIR, or --prefill, --decode and --weights (no {what})"),
    };
    let prefill = pick(
        &m.prefill,
        dir.as_ref().map(|d| d.prefill.clone()),
        "--prefill",
    )?;
    let decode = pick(
        &m.decode,
        dir.as_ref().map(|d| d.decode.clone()),
        "--decode",
    )?;
    let weights = match (&m.weights, &dir) {
        (Some(w), _) => w.clone(),
        (None, Some(d)) => d.weights.clone(),
        (None, None) => {
            bail!("pass MODEL_DIR, or --prefill, --decode and --weights (no --weights)")
        }
    };
    let tok_dir = m
        .tokenizer
        .clone()
        .or_else(|| m.model.clone().filter(|d| TextTokenizer::exists_in(d)));
    let target = Target::by_name(&m.target)
        .with_context(|| format!("unknown target '{}' (known: {})", m.target, Target::names()))?;
    let opts = CompileOptions {
        target,
        dtype: m.dtype.map(Into::into),
    };
    let t = Instant::now();
    let tokenizer = match &tok_dir {
        Some(d) => Some(TextTokenizer::from_dir(d)?),
        None => None,
    };
    match &tokenizer {
        None if needs >= Needs::Tokenizer => {
            let dir = m.model.clone().unwrap_or_else(|| PathBuf::from("."));
            return Err(npu_text::TextError::NoTokenizer { dir }.into());
        }
        Some(tk) if needs == Needs::ChatTemplate && tk.chat_template().is_none() => {
            return Err(npu_text::TextError::NoChatTemplate.into());
        }
        _ => {}
    }
    let salt = compiler_salt();
    let bar = progress(4);
    let mut notes = Vec::new();
    let mut programs = Vec::new();
    for g in [&prefill, &decode] {
        let cache = match &m.model {
            Some(d) => d.join(npu_text::CACHE_DIR),
            None => g
                .path()
                .parent()
                .unwrap_or(Path::new("."))
                .join(npu_text::CACHE_DIR),
        };
        bar.set_message(format!("loading {}", g.path().display()));
        let p = load_program(g, &opts, &cache, &salt, &mut |e| match e {
            LoadEvent::Compiling(p) => {
                bar.set_message(format!("compiling {} (first use)", p.display()))
            }
            LoadEvent::Compiled {
                ir,
                seconds,
                cache,
                why,
            } => notes.push(match (cache, why) {
                (Some(c), _) => format!(
                    "compiled {} in {:.0} ms -> {}",
                    ir.display(),
                    seconds * 1e3,
                    c.display()
                ),
                (None, why) => format!(
                    "compiled {} in {:.0} ms (not cached: {})",
                    ir.display(),
                    seconds * 1e3,
                    why.unwrap_or_default()
                ),
            }),
            // Reusing the cache is the normal case: nothing to say.
            LoadEvent::Cached(_) => {}
        })?;
        programs.push(p);
        bar.inc(1);
    }
    bar.set_message(format!("opening {}", weights.display()));
    let source = open_weights(Some(&weights))?;
    let backend = backend_by_name(&m.backend)?;
    let mut exes = Vec::new();
    for (p, g) in programs.iter().zip([&prefill, &decode]) {
        bar.set_message(format!("preparing {} on {}", g.path().display(), m.backend));
        exes.push(
            backend
                .prepare(p, source.as_ref())
                .with_context(|| format!("cannot prepare {}", g.path().display()))?,
        );
        bar.inc(1);
    }
    let decode_exe = exes.pop().context("two programs")?;
    let prefill_exe = exes.pop().context("two programs")?;
    let session = Session::new(prefill_exe, decode_exe)?;
    if let (Some(tk), Some(d)) = (&tokenizer, &tok_dir) {
        if tk.vocab_size() > session.vocab_size() {
            bail!(
                "{}: the tokenizer has {} tokens, the model's logits only {}",
                d.display(),
                tk.vocab_size(),
                session.vocab_size()
            );
        }
    }
    bar.finish_and_clear();
    // First-use compiles are worth a line (on stderr, before any generated text).
    for n in &notes {
        eprintln!("{n}");
    }
    Ok(Loaded {
        session,
        tokenizer,
        load_s: t.elapsed().as_secs_f64(),
    })
}

/// The tokenizer that [`load`] checked was there.
pub fn tokenizer(l: &Loaded) -> Result<&TextTokenizer> {
    l.tokenizer.as_ref().context("no tokenizer")
}
