//! `npu`: compile torch_ir graphs for an NPU target, inspect programs, check constraints.

#[macro_use]
mod out;
mod backends;
mod check;
mod generate;
mod partition;
mod profile;
mod run;
mod run_graph;

use anyhow::{Context, Result};
use clap::{error::ErrorKind, Parser, Subcommand, ValueEnum};
use npu_compiler::{describe, npubin, target, CompileOptions};
use npu_ir::DType;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "npu",
    version,
    about = "NPU compiler and runtime for PyTorch (torch_ir) graphs"
)]
struct Cli {
    /// Refuse tensors, arenas and weight sets larger than this (bytes, or with a K/M/G/T
    /// suffix); default: the machine's physical memory.
    #[arg(long, global = true, value_name = "SIZE", value_parser = npu_runtime::limits::parse_size)]
    max_memory: Option<u64>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum DTypeArg {
    F16,
    Bf16,
    F32,
}

impl From<DTypeArg> for DType {
    fn from(d: DTypeArg) -> DType {
        match d {
            DTypeArg::F16 => DType::F16,
            DTypeArg::Bf16 => DType::BF16,
            DTypeArg::F32 => DType::F32,
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Compile an IR JSON file into an .npubin program.
    Compile {
        model: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
        /// Target to compile for: npu (channel-padded NCHW), cpu, or gpu (channels-last,
        /// the layout the CUDA backend's tensor-core convolutions read directly).
        #[arg(long, default_value = "npu")]
        target: String,
        /// Compute dtype (default: the model's; f16 for f32 models on the NPU target).
        #[arg(long, value_enum)]
        dtype: Option<DTypeArg>,
        /// Print what the passes did.
        #[arg(long, short)]
        verbose: bool,
    },
    /// Print a human-readable dump of an .npubin program.
    Describe {
        program: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check that every node runs, on the target or on the CPU fallback; list the nodes
    /// that run on the fallback, and fail (exit code 1) naming each node nobody can run.
    Check {
        model: PathBuf,
        #[arg(long, default_value = "npu")]
        target: String,
    },
    /// Run a compiled program (.npubin), or an IR JSON graph: the graph is partitioned for
    /// the target, its NPU partitions compiled, and ops the target lacks run on the CPU
    /// fallback. Inputs and outputs are safetensors keyed by graph names.
    Run {
        program: PathBuf,
        /// For IR JSON: the target to partition and compile for (npu, cpu, gpu); default gpu
        /// with --backend cuda, else npu.
        #[arg(long)]
        target: Option<String>,
        /// For IR JSON: compute dtype of the NPU partitions.
        #[arg(long, value_enum)]
        dtype: Option<DTypeArg>,
        /// For IR JSON: run these ops on the CPU fallback (op type or base name). Repeatable.
        #[arg(long = "force-cpu", value_name = "OP")]
        force_cpu: Vec<String>,
        #[arg(long)]
        weights: Option<PathBuf>,
        #[arg(long)]
        inputs: Option<PathBuf>,
        #[arg(long)]
        outputs: Option<PathBuf>,
        /// The backend that runs the NPU partitions: cpu, cuda or wgpu.
        #[arg(long, default_value = "cpu")]
        backend: String,
        /// Run this many times and report the timings.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// Time every step and print where the time goes.
        #[arg(long)]
        profile: bool,
    },
    /// Show how a graph splits into NPU and CPU partitions for a target.
    Partition {
        model: PathBuf,
        #[arg(long, default_value = "npu")]
        target: String,
        /// Run these ops on the CPU even if the target supports them: a full op type
        /// (aten.softmax.int) or a base name (softmax). Repeatable.
        #[arg(long = "force-cpu", value_name = "OP")]
        force_cpu: Vec<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Generate text (or tokens) with a prefill and a decode program sharing the KV cache:
    /// `npu generate MODEL_DIR --prompt "..."` streams the text to stdout.
    Generate {
        #[command(flatten)]
        model: generate::args::ModelArgs,
        /// The prompt text.
        #[arg(long, conflicts_with_all = ["prompt_file", "prompt_ids"])]
        prompt: Option<String>,
        /// Read the prompt from this file (`-`: stdin). Without a prompt option, a prompt
        /// piped on stdin is read.
        #[arg(long, value_name = "FILE", conflicts_with = "prompt_ids")]
        prompt_file: Option<PathBuf>,
        /// Comma-separated token ids instead of text; prints the generated ids.
        #[arg(long, value_delimiter = ',')]
        prompt_ids: Vec<i64>,
        /// Render the prompt as a user message with the tokenizer's chat template.
        #[arg(long)]
        chat: bool,
        /// With --chat: the system message.
        #[arg(long, requires = "chat")]
        system: Option<String>,
        #[command(flatten)]
        sampling: generate::args::SamplingArgs,
        /// Print one JSON object (text, tokens, timings) instead of streaming.
        #[arg(long)]
        json: bool,
        /// Time every step of prefill and decode and print where the time goes.
        #[arg(long)]
        profile: bool,
    },
    /// Talk to a model: an interactive loop that keeps the KV cache across turns
    /// (`/reset` starts over, `/exit` ends).
    Chat {
        #[command(flatten)]
        model: generate::args::ModelArgs,
        /// The system message.
        #[arg(long)]
        system: Option<String>,
        #[command(flatten)]
        sampling: generate::args::SamplingArgs,
    },
}

fn find_target(name: &str) -> Result<&'static npu_compiler::Target> {
    target::Target::by_name(name).with_context(|| {
        format!(
            "unknown target '{name}' (known: {})",
            target::Target::names()
        )
    })
}

/// Loads an IR graph and checks its sizes against the memory limit.
fn load_graph(model: &std::path::Path) -> Result<npu_ir::Graph> {
    let graph = npu_ir::load(model)?;
    npu_runtime::limits::check_graph(&graph).with_context(|| model.display().to_string())?;
    Ok(graph)
}

fn run(cli: Cli) -> Result<ExitCode> {
    npu_runtime::limits::set_memory_limit(cli.max_memory);
    match cli.cmd {
        Cmd::Compile {
            model,
            output,
            target,
            dtype,
            verbose,
        } => {
            let target = find_target(&target)?;
            out::refuse_alias(&output, "output", &[("model", &model)])?;
            let start = std::time::Instant::now();
            let graph = load_graph(&model)?;
            let opts = CompileOptions {
                target,
                dtype: dtype.map(Into::into),
            };
            let (program, report) = npu_compiler::compile(graph, &opts)
                .with_context(|| format!("cannot compile {}", model.display()))?;
            out::write_file(&output, &npubin::to_bytes(&program))?;
            let elapsed = start.elapsed();
            say!(
                "compiled {} -> {} ({} IR nodes -> {} steps, arena {:.2} MiB, compute {}, target {}) in {:.0} ms",
                model.display(),
                output.display(),
                report.ir_nodes,
                program.steps.len(),
                program.arena_bytes as f64 / 1048576.0,
                program.compute_dtype,
                program.target,
                elapsed.as_secs_f64() * 1e3
            );
            if verbose {
                say!("canonicalize: {:?}", report.canonical);
                say!("batch norm: {:?}", report.bn);
                say!("fusions: {:?}", report.fusions);
                say!("padded values: {}", report.padded_values);
                for (stage, t) in &report.timings {
                    say!("  {stage:<20} {:>8.2} ms", t.as_secs_f64() * 1e3);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Describe { program, json } => {
            let p = npubin::load(&program)?;
            if json {
                say!(
                    "{}",
                    serde_json::to_string_pretty(&describe::describe_json(&p))?
                );
            } else {
                crate::out::write(format_args!("{}", describe::describe_text(&p)));
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run {
            program,
            target,
            dtype,
            force_cpu,
            weights,
            inputs,
            outputs,
            backend,
            repeat,
            profile,
        } => {
            let is_graph = program.extension().is_some_and(|e| e == "json");
            if let Some(o) = &outputs {
                let mut read: Vec<(&str, &std::path::Path)> = vec![("program", &program)];
                read.extend(weights.as_deref().map(|w| ("weights", w)));
                read.extend(inputs.as_deref().map(|i| ("inputs", i)));
                out::refuse_alias(o, "--outputs", &read)?;
            }
            let args = run::RunArgs {
                program,
                weights,
                inputs,
                outputs,
                backend,
                repeat,
                profile,
            };
            if is_graph {
                let default = if args.backend == "cuda" { "gpu" } else { "npu" };
                let graph = run_graph::GraphArgs {
                    target: find_target(target.as_deref().unwrap_or(default))?,
                    dtype: dtype.map(Into::into),
                    force_cpu,
                };
                run_graph::run(args, graph)?;
            } else {
                if !force_cpu.is_empty() {
                    anyhow::bail!("--force-cpu applies to IR JSON models, not compiled programs");
                }
                run::run(args)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Generate {
            model,
            prompt,
            prompt_file,
            prompt_ids,
            chat,
            system,
            sampling,
            json,
            profile,
        } => {
            generate::generate(generate::GenerateArgs {
                model,
                sampling,
                prompt: generate::PromptArgs {
                    prompt,
                    prompt_file,
                    prompt_ids,
                    chat,
                    system,
                },
                json,
                profile,
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Chat {
            model,
            system,
            sampling,
        } => {
            generate::chat::chat(generate::chat::ChatArgs {
                model,
                sampling,
                system,
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Partition {
            model,
            target,
            force_cpu,
            json,
        } => {
            let target = find_target(&target)?;
            partition::show(&model, target, &force_cpu, json)
        }
        Cmd::Check { model, target } => check::check(&model, find_target(&target)?),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e)
            if !e.use_stderr()
                || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            e.exit()
        }
        Err(e) => {
            // One line like every other error (clap adds usage lines).
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or_default();
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("error: {first} (npu --help lists the options)");
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // The chain, each cause once: library errors never repeat their source.
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
