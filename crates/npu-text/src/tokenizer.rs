//! A Hugging Face tokenizer directory: `tokenizer.json` (the `tokenizers` library's file),
//! `tokenizer_config.json` (special tokens, the chat template), and when present
//! `chat_template.jinja` (where transformers 5 saves the template) and
//! `generation_config.json` (the ids that end generation).

use crate::error::{Result, TextError};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The special-token names a chat template sees as variables (transformers passes its
/// `special_tokens_map`).
const SPECIAL_NAMES: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// A loaded tokenizer with its configuration.
pub struct TextTokenizer {
    tk: tokenizers::Tokenizer,
    dir: PathBuf,
    special: BTreeMap<String, String>,
    chat_template: Option<String>,
    eos_ids: Vec<u32>,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("dir", &self.dir)
            .field("vocab_size", &self.vocab_size())
            .field("eos_ids", &self.eos_ids)
            .finish()
    }
}

pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| TextError::io(path, e))?;
    serde_json::from_str(&text).map_err(|source| TextError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// A token written as a string or as an AddedToken object (`{"content": ...}`).
fn token_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

impl TextTokenizer {
    /// Whether `dir` holds a tokenizer (`tokenizer.json`).
    pub fn exists_in(dir: &Path) -> bool {
        dir.join("tokenizer.json").is_file()
    }

    /// Loads the tokenizer files of `dir`.
    pub fn from_dir(dir: &Path) -> Result<TextTokenizer> {
        let file = dir.join("tokenizer.json");
        if !file.is_file() {
            return Err(TextError::NoTokenizer {
                dir: dir.to_path_buf(),
            });
        }
        let tk =
            tokenizers::Tokenizer::from_file(&file).map_err(|source| TextError::TokenizerLoad {
                path: file.clone(),
                source,
            })?;
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg = if cfg_path.is_file() {
            read_json(&cfg_path)?
        } else {
            Value::Object(Default::default())
        };
        let mut special = BTreeMap::new();
        for name in SPECIAL_NAMES {
            if let Some(t) = cfg.get(name).and_then(token_text) {
                special.insert(name.to_string(), t);
            }
        }
        let jinja = dir.join("chat_template.jinja");
        let chat_template = if jinja.is_file() {
            Some(std::fs::read_to_string(&jinja).map_err(|e| TextError::io(&jinja, e))?)
        } else {
            template_from_config(&cfg, &cfg_path)?
        };
        let mut t = TextTokenizer {
            tk,
            dir: dir.to_path_buf(),
            special,
            chat_template,
            eos_ids: Vec::new(),
        };
        t.eos_ids = t.find_eos(dir)?;
        Ok(t)
    }

    /// generation_config.json's `eos_token_id` (an id or a list) when it has one, else the
    /// id of tokenizer_config.json's `eos_token`: what Hugging Face's `generate` stops at.
    fn find_eos(&self, dir: &Path) -> Result<Vec<u32>> {
        let gen = dir.join("generation_config.json");
        if gen.is_file() {
            let v = read_json(&gen)?;
            let bad = || TextError::Config {
                path: gen.clone(),
                message: "eos_token_id must be a token id or a list of them".into(),
            };
            match v.get("eos_token_id") {
                None | Some(Value::Null) => {}
                Some(Value::Array(a)) => {
                    return a
                        .iter()
                        .map(|x| {
                            x.as_u64()
                                .and_then(|x| u32::try_from(x).ok())
                                .ok_or_else(bad)
                        })
                        .collect()
                }
                Some(x) => {
                    let id = x
                        .as_u64()
                        .and_then(|x| u32::try_from(x).ok())
                        .ok_or_else(bad)?;
                    return Ok(vec![id]);
                }
            }
        }
        Ok(self
            .special
            .get("eos_token")
            .and_then(|t| self.tk.token_to_id(t))
            .into_iter()
            .collect())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Token ids of `text`; `add_special_tokens` applies the tokenizer's post-processor
    /// (a BOS, say), as `tokenizer(text)` does in Python.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc =
            self.tk
                .encode(text, add_special_tokens)
                .map_err(|source| TextError::Tokenizer {
                    what: "encode the prompt".into(),
                    source,
                })?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`. Ids the vocabulary lacks decode to nothing (as in Python).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.tk
            .decode(ids, skip_special_tokens)
            .map_err(|source| TextError::Tokenizer {
                what: format!("decode {} tokens", ids.len()),
                source,
            })
    }

    /// Number of tokens, added (special) tokens included.
    pub fn vocab_size(&self) -> usize {
        self.tk.get_vocab_size(true)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.tk.token_to_id(token)
    }

    /// The ids that end generation (possibly none).
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// `bos_token`, `eos_token`, ... as strings, for the chat template.
    pub fn special_tokens(&self) -> &BTreeMap<String, String> {
        &self.special
    }

    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }
}

/// tokenizer_config.json's `chat_template`: a string, or a list of `{name, template}` of
/// which the one named `default` (else the first) is used.
fn template_from_config(cfg: &Value, path: &Path) -> Result<Option<String>> {
    match cfg.get("chat_template") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(list)) => {
            let named = |n: &str| {
                list.iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some(n))
            };
            let t = named("default").or(list.first());
            Ok(t.and_then(|t| t.get("template"))
                .and_then(Value::as_str)
                .map(str::to_string))
        }
        Some(_) => Err(TextError::Config {
            path: path.to_path_buf(),
            message: "chat_template must be a string or a list of {name, template}".into(),
        }),
    }
}
