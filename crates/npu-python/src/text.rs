//! `npu._native.TextModel`: text in, text out over a model directory, with the session,
//! tokenizer, chat template and sampling of `npu generate` (the `npu-text` crate), so the
//! Python package and the CLI generate the same tokens from the same options.

use crate::error::{chain, guard, guard_nogil, Fail, Res};
use crate::runtime::{open_backend, AnyBackend};
use npu_compiler::{target::Target, CompileOptions};
use npu_runtime::SafetensorsFile;
use npu_text::{
    ChatTemplate, GenerateOptions, GraphFile, Message, ModelDir, Sampler, SamplingParams, Session,
    TextError, TextTokenizer,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

impl From<TextError> for Fail {
    fn from(e: TextError) -> Fail {
        let kind = match &e {
            TextError::Invalid(_) | TextError::NoTokenizer { .. } | TextError::NoChatTemplate => {
                "InputError"
            }
            _ => "RuntimeError",
        };
        Fail::new(kind, chain(&e))
    }
}

struct Inner {
    session: Session,
    tokenizer: Option<TextTokenizer>,
    /// Keeps the device of the session's executables alive.
    _backend: AnyBackend,
}

/// A causal LM directory (`prefill`/`decode` IR or programs, `weights.safetensors`, and the
/// tokenizer files when the export had them), prepared on one backend; the KV cache lives
/// on the device for the model's life.
#[pyclass(module = "npu._native", name = "TextModel", frozen)]
pub struct PyTextModel {
    inner: Mutex<Inner>,
}

impl PyTextModel {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A prompt: text (encoded with the model's tokenizer) or token ids.
#[derive(FromPyObject)]
enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

fn load(dir: &std::path::Path, backend: &str, target: &str, dtype: Option<&str>) -> Res<Inner> {
    let md = ModelDir::open(dir)?;
    let target = Target::by_name(target).ok_or_else(|| {
        Fail::input(format!(
            "unknown target '{target}' (known: {})",
            npu_compiler::target::Target::names()
        ))
    })?;
    let dtype = crate::compile::dtype_opt(dtype)?;
    let opts = CompileOptions { target, dtype };
    // IR compiles in milliseconds: no cache here (the CLI keeps one beside the model).
    let program = |g: &GraphFile| -> Res<npu_compiler::Program> {
        match g {
            GraphFile::Ir(p) => Ok(npu_compiler::compile(npu_ir::load(p)?, &opts)?.0),
            GraphFile::Program(p) => Ok(npu_compiler::npubin::load(p)?),
        }
    };
    let (pre, dec) = (program(&md.prefill)?, program(&md.decode)?);
    let weights = SafetensorsFile::open(&md.weights)?;
    let any = open_backend(backend)?;
    let b = any.get();
    let session = Session::new(b.prepare(&pre, &weights)?, b.prepare(&dec, &weights)?)?;
    let tokenizer = if TextTokenizer::exists_in(dir) {
        Some(TextTokenizer::from_dir(dir)?)
    } else {
        None
    };
    Ok(Inner {
        session,
        tokenizer,
        _backend: any,
    })
}

#[pymethods]
impl PyTextModel {
    #[new]
    #[pyo3(signature = (model_dir, backend = "cpu", target = "npu", dtype = None))]
    fn new(
        py: Python<'_>,
        model_dir: PathBuf,
        backend: &str,
        target: &str,
        dtype: Option<&str>,
    ) -> PyResult<PyTextModel> {
        let inner = guard_nogil(py, || load(&model_dir, backend, target, dtype))?;
        Ok(PyTextModel {
            inner: Mutex::new(inner),
        })
    }

    /// Token ids of `text` (with `add_special_tokens`, as the tokenizer's post-processor
    /// says).
    #[pyo3(signature = (text, add_special_tokens = true))]
    fn encode(&self, text: &str, add_special_tokens: bool) -> PyResult<Vec<u32>> {
        guard(|| Ok(tokenizer(&self.lock())?.encode(text, add_special_tokens)?))
    }

    /// The text of `ids`, special tokens skipped.
    fn decode(&self, ids: Vec<u32>) -> PyResult<String> {
        guard(|| Ok(tokenizer(&self.lock())?.decode(&ids, true)?))
    }

    /// The chat template rendered over `[(role, content)]`, with the generation prompt.
    fn chat_prompt(&self, messages: Vec<(String, String)>) -> PyResult<String> {
        guard(|| {
            let g = self.lock();
            let tk = tokenizer(&g)?;
            let src = tk.chat_template().ok_or(TextError::NoChatTemplate)?;
            let msgs: Vec<Message> = messages.iter().map(|(r, c)| Message::new(r, c)).collect();
            Ok(ChatTemplate::new(src)?.render(&msgs, true, tk.special_tokens())?)
        })
    }

    /// Forgets the cached context (the next prompt starts from an empty cache).
    fn reset(&self) {
        self.lock().session.reset();
    }

    /// Generates from `prompt` (text or token ids) with `npu generate`'s options; greedy when
    /// `temperature` is 0. `on_text(piece)` receives the text as it becomes final. Returns a
    /// dict: text, tokens, finish ("eos", "stop", "length", "cache_full"), prompt_tokens and
    /// timings. The cache starts empty for every call.
    #[pyo3(signature = (prompt, max_new_tokens = None, temperature = 0.0, top_k = 0, top_p = 1.0,
                        min_p = 0.0, repetition_penalty = 1.0, seed = 0, stop = Vec::new(),
                        on_text = None))]
    #[allow(clippy::too_many_arguments)]
    fn generate<'py>(
        &self,
        py: Python<'py>,
        prompt: Prompt,
        max_new_tokens: Option<usize>,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repetition_penalty: f32,
        seed: u64,
        stop: Vec<String>,
        on_text: Option<PyObject>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let params = SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p,
            repetition_penalty,
        };
        let g = guard_nogil(py, || {
            params.validate()?;
            let mut inner = self.lock();
            let Inner {
                session, tokenizer, ..
            } = &mut *inner;
            let ids = match prompt {
                Prompt::Ids(ids) => ids,
                Prompt::Text(t) => tokenizer
                    .as_ref()
                    .ok_or_else(|| Fail::input("the model directory has no tokenizer"))?
                    .encode(&t, true)?,
            };
            let opts = GenerateOptions {
                max_new_tokens,
                stop,
                eos: tokenizer
                    .as_ref()
                    .map(|t| t.eos_token_ids().to_vec())
                    .unwrap_or_default(),
            };
            let mut sampler = Sampler::new(params.clone(), seed);
            let mut sink = |piece: &str| -> std::io::Result<()> {
                if let Some(cb) = &on_text {
                    Python::with_gil(|py| cb.call1(py, (piece,)).map(|_| ()))
                        .map_err(|e| std::io::Error::other(e.to_string()))?;
                }
                Ok(())
            };
            session.reset();
            Ok(npu_text::generate(
                session,
                tokenizer.as_ref(),
                &ids,
                &opts,
                &mut sampler,
                &mut sink,
            )?)
        })?;
        let d = PyDict::new(py);
        d.set_item("text", &g.text)?;
        d.set_item("tokens", &g.tokens)?;
        d.set_item("finish", g.finish.as_str())?;
        d.set_item("prompt_tokens", g.prompt_tokens)?;
        d.set_item("prefill_s", g.prefill_s)?;
        d.set_item("decode_s", g.decode_s)?;
        d.set_item("decode_model_s", g.decode_model_s)?;
        d.set_item("decode_tokens_per_s", g.decode_tokens_per_s())?;
        Ok(d)
    }
}

fn tokenizer(g: &Inner) -> Res<&TextTokenizer> {
    g.tokenizer
        .as_ref()
        .ok_or_else(|| Fail::input("the model directory has no tokenizer"))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTextModel>()
}
