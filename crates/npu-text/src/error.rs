//! The crate's error: each variant names the file, token or setting at fault; a wrapped
//! cause is kept as the `source`, never repeated in the message.

use std::path::PathBuf;

pub type Result<T, E = TextError> = std::result::Result<T, E>;

/// The tokenizers crate's error type (a boxed `std::error::Error`).
type TkError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum TextError {
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("cannot load the tokenizer {path}")]
    TokenizerLoad {
        path: PathBuf,
        #[source]
        source: TkError,
    },
    #[error("cannot {what} with the tokenizer")]
    Tokenizer {
        what: String,
        #[source]
        source: TkError,
    },
    #[error("{dir} has no tokenizer (tokenizer.json): export the model with --tokenizer DIR or --hf-dir")]
    NoTokenizer { dir: PathBuf },
    #[error("the tokenizer has no chat template (tokenizer_config.json's chat_template or chat_template.jinja)")]
    NoChatTemplate,
    #[error("the chat template {what}")]
    Template {
        what: String,
        #[source]
        source: minijinja::Error,
    },
    #[error("{dir}: {message}")]
    ModelDir { dir: PathBuf, message: String },
    #[error("cannot compile {path}")]
    Compile {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{what}")]
    Runtime {
        what: String,
        #[source]
        source: Box<npu_runtime::RuntimeError>,
    },
    /// A program that does not follow the prefill/decode convention (inputs, shapes).
    #[error("{program}: {message}")]
    Program { program: String, message: String },
    #[error("{0}")]
    Invalid(String),
    #[error("the KV cache is full: {needed} slots needed, {max} in the cache")]
    CacheFull { needed: usize, max: usize },
    #[error("token {id} is outside the model's vocabulary of {vocab}")]
    TokenOutOfRange { id: u32, vocab: usize },
    /// The caller's text sink failed (a closed pipe, say).
    #[error("cannot write the generated text")]
    Sink(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl TextError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TextError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn runtime(what: impl Into<String>, source: npu_runtime::RuntimeError) -> Self {
        TextError::Runtime {
            what: what.into(),
            source: Box::new(source),
        }
    }
}
