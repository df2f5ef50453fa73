//! The options `npu generate` and `npu chat` share: where the model is, how to compile and
//! run it, and how to sample.

use crate::DTypeArg;
use clap::Args;
use npu_text::SamplingParams;
use std::path::PathBuf;

/// The model: a directory, or its files one by one (which override the directory's).
#[derive(Args, Clone)]
pub struct ModelArgs {
    /// A model directory from the export tool: prefill.ir.json, decode.ir.json,
    /// weights.safetensors and the tokenizer files. The graphs are compiled on first use
    /// into MODEL_DIR/.npu-cache and reused.
    #[arg(value_name = "MODEL_DIR")]
    pub model: Option<PathBuf>,
    /// The prefill program (.npubin, or IR JSON compiled on use).
    #[arg(long)]
    pub prefill: Option<PathBuf>,
    /// The decode program (.npubin, or IR JSON compiled on use).
    #[arg(long)]
    pub decode: Option<PathBuf>,
    /// The weights (safetensors, keyed by the IR's weight names).
    #[arg(long)]
    pub weights: Option<PathBuf>,
    /// A tokenizer directory (tokenizer.json, tokenizer_config.json); default: MODEL_DIR's.
    #[arg(long, value_name = "DIR")]
    pub tokenizer: Option<PathBuf>,
    /// The backend that runs the programs (cpu, cuda, wgpu).
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// Target the IR graphs are compiled for (npu, cpu, gpu).
    #[arg(long, default_value = "npu")]
    pub target: String,
    /// Compute dtype of the compiled graphs (default: the compiler's choice for the target).
    #[arg(long, value_enum)]
    pub dtype: Option<DTypeArg>,
}

/// Sampling and stopping.
#[derive(Args, Clone)]
pub struct SamplingArgs {
    /// 0 (the default) is greedy; otherwise the softmax temperature.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Sample among the k most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Sample among the most likely tokens whose probabilities add up to p.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub top_p: f32,
    /// Drop tokens less likely than this fraction of the most likely one.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub min_p: f32,
    /// Penalize tokens already in the context (> 1 discourages repeats).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub repetition_penalty: f32,
    /// Seed of the sampler (default: from the clock, printed with the timings).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop when the generated text contains this string (cut from the output). Repeatable.
    #[arg(long = "stop", value_name = "TEXT")]
    pub stop: Vec<String>,
    /// At most this many new tokens (default: until an end-of-sequence token or a stop
    /// string, or until the KV cache is full; 16 with --prompt-ids).
    #[arg(long)]
    pub max_new_tokens: Option<usize>,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repetition_penalty,
        }
    }

    /// Refuses settings outside their domain before anything loads.
    pub fn validate(&self) -> npu_text::Result<()> {
        self.params().validate()?;
        if self.stop.iter().any(String::is_empty) {
            return Err(npu_text::TextError::Invalid(
                "a --stop string is empty".into(),
            ));
        }
        if self.max_new_tokens == Some(0) {
            return Err(npu_text::TextError::Invalid(
                "--max-new-tokens must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// The seed: the given one, or one from the clock.
    pub fn seed(&self) -> u64 {
        self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        })
    }
}
