//! Text in, text out for causal language models compiled by this project: a Hugging Face
//! tokenizer ([`TextTokenizer`]), its chat template rendered like transformers renders it
//! ([`ChatTemplate`]), sampling with Hugging Face's semantics ([`Sampler`]), streaming text
//! that never splits a character ([`TextStream`], [`StopStrings`]), model directories whose
//! graphs compile on first use ([`ModelDir`]), and the prefill/decode [`Session`] over one
//! device-resident KV cache that [`generate`] drives.
//!
//! Nothing here prints: progress is reported through callbacks and text through a sink.

mod error;
pub mod generate;
pub mod model_dir;
pub mod rng;
pub mod sampling;
pub mod session;
pub mod stream;
mod strftime;
pub mod template;
pub mod tokenizer;

pub use error::{Result, TextError};
pub use generate::{generate, Finish, GenerateOptions, Generation};
pub use model_dir::{load_program, GraphFile, LoadEvent, ModelDir, CACHE_DIR};
pub use sampling::{Sampler, SamplingParams};
pub use session::{LanguageModel, Session};
pub use stream::{StopStrings, TextStream};
pub use template::{ChatTemplate, Message};
pub use tokenizer::TextTokenizer;
