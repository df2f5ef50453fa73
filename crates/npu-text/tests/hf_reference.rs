//! The tokenizer, the chat template and the sampler against what the Python libraries give on
//! the same files: `text_reference.json` in the `qwen2.5-tiny-text` export that
//! `scripts/make-test-models.sh` writes (`$NPU_TEST_MODELS`, default `target/test-models`): a
//! small BPE trained with `tokenizers`, rendered by transformers' `apply_chat_template`, and
//! Hugging Face's logits processors on the model's logits. A missing export is reported and
//! skipped, or fails with `NPU_REQUIRE_MODELS=1` (scripts/test.sh sets it).

use npu_compiler::{target::Target, CompileOptions};
use npu_ir::DType;
use npu_runtime::{Backend, CpuBackend, SafetensorsFile};
use npu_text::{
    load_program, ChatTemplate, GraphFile, LanguageModel, Sampler, SamplingParams, Session,
    TextTokenizer,
};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn model_dir(test: &str) -> Option<PathBuf> {
    let root = std::env::var_os("NPU_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-models")
        });
    let dir = root.join("qwen2.5-tiny-text");
    if dir.join("text_reference.json").is_file() {
        return Some(dir);
    }
    let required = std::env::var("NPU_REQUIRE_MODELS").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{}: no export; run scripts/make-test-models.sh",
        dir.display()
    );
    // scripts/test.sh counts this line as a skip.
    println!(
        "SKIP: {test}: no export in {} (scripts/make-test-models.sh makes it)",
        dir.display()
    );
    None
}

fn reference(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("text_reference.json")).unwrap())
        .unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn encode_and_decode_equal_python_tokenizers() {
    let Some(dir) = model_dir("encode_and_decode_equal_python_tokenizers") else {
        return;
    };
    let r = reference(&dir);
    let tk = TextTokenizer::from_dir(&dir).unwrap();
    assert_eq!(
        tk.vocab_size() as u64,
        r["tokenizer"]["vocab_size"].as_u64().unwrap()
    );
    assert_eq!(tk.eos_token_ids(), ids(&r["tokenizer"]["eos_token_ids"]));
    let cases = r["encode"].as_array().unwrap();
    let mut multibyte = 0;
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let want = ids(&c["ids"]);
        let got = tk.encode(text, true).unwrap();
        assert_eq!(got, want, "encode {text:?}");
        assert_eq!(
            tk.decode(&got, false).unwrap(),
            c["decoded"].as_str().unwrap(),
            "decode {text:?}"
        );
        assert_eq!(
            tk.decode(&got, true).unwrap(),
            c["decoded_skip_special"].as_str().unwrap(),
            "decode {text:?} without special tokens"
        );
        multibyte += usize::from(text.len() != text.chars().count());
    }
    assert!(multibyte >= 4, "the cases must include multi-byte UTF-8");
}

#[test]
fn chat_prompts_equal_transformers_apply_chat_template() {
    let Some(dir) = model_dir("chat_prompts_equal_transformers_apply_chat_template") else {
        return;
    };
    let r = reference(&dir);
    let tk = TextTokenizer::from_dir(&dir).unwrap();
    let t = ChatTemplate::new(tk.chat_template().expect("a chat template")).unwrap();
    let cases = r["chat"].as_array().unwrap();
    assert!(cases.len() >= 3);
    for c in cases {
        let gen = c["add_generation_prompt"].as_bool().unwrap();
        let got = t.render(&c["messages"], gen, tk.special_tokens()).unwrap();
        assert_eq!(got, c["text"].as_str().unwrap(), "{}", c["messages"]);
        assert_eq!(tk.encode(&got, false).unwrap(), ids(&c["ids"]));
    }
}

fn params(c: &Value) -> SamplingParams {
    let f = |k: &str| c[k].as_f64().unwrap() as f32;
    SamplingParams {
        temperature: f("temperature"),
        top_k: c["top_k"].as_u64().unwrap() as usize,
        top_p: f("top_p"),
        min_p: f("min_p"),
        repetition_penalty: f("repetition_penalty"),
    }
}

/// The chi-square statistic of `counts` against probabilities `p` (cells with an expected
/// count under 5 pooled), and its degrees of freedom.
fn chi_square(counts: &[usize], p: &[f64], n: usize) -> (f64, usize) {
    let (mut chi, mut cells) = (0.0, 0usize);
    let (mut pool_c, mut pool_e) = (0.0, 0.0);
    for (&c, &q) in counts.iter().zip(p) {
        let e = q * n as f64;
        if e >= 5.0 {
            chi += (c as f64 - e).powi(2) / e;
            cells += 1;
        } else {
            pool_c += c as f64;
            pool_e += e;
        }
    }
    if pool_e >= 5.0 {
        chi += (pool_c - pool_e).powi(2) / pool_e;
        cells += 1;
    }
    (chi, cells.saturating_sub(1))
}

/// The chi-square value exceeded with probability 0.001 (Wilson-Hilferty).
fn chi_square_critical(df: usize) -> f64 {
    let k = df.max(1) as f64;
    let h = 2.0 / (9.0 * k);
    k * (1.0 - h + 3.09 * h.sqrt()).powi(3)
}

#[test]
fn sampling_follows_hf_logits_processors_on_the_models_logits() {
    let Some(dir) = model_dir("sampling_follows_hf_logits_processors_on_the_models_logits") else {
        return;
    };
    let r = reference(&dir);
    let s = &r["sampling"];
    let want_logits: Vec<f32> = s["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();

    // Our session's logits for the prompt (54 tokens: chunked prefill) are the model's.
    let opts = CompileOptions {
        target: Target::by_name("cpu").unwrap(),
        dtype: Some(DType::F32),
    };
    let cache = std::env::temp_dir().join(format!("npu-text-ref-{}", std::process::id()));
    let program = |g: &str| {
        load_program(
            &GraphFile::Ir(dir.join(format!("{g}.ir.json"))),
            &opts,
            &cache,
            "test",
            &mut |_| {},
        )
        .unwrap()
    };
    let w = SafetensorsFile::open(&dir.join("weights.safetensors")).unwrap();
    let cpu = CpuBackend::new();
    let mut session = Session::new(
        cpu.prepare(&program("prefill"), &w).unwrap(),
        cpu.prepare(&program("decode"), &w).unwrap(),
    )
    .unwrap();
    let prompt = ids(&s["prompt_ids"]);
    assert!(prompt.len() > session.prefill_len());
    let logits = session.extend(&prompt).unwrap();
    let diff = logits
        .iter()
        .zip(&want_logits)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(diff < 1e-3, "logits differ from PyTorch's by {diff}");
    std::fs::remove_dir_all(&cache).ok();

    for c in s["cases"].as_array().unwrap() {
        let p = params(c);
        let hf: Vec<f64> = c["probs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let history = ids(&c["history"]);
        let mut sampler = Sampler::new(p.clone(), 1234);
        let ours = sampler.distribution(&want_logits, &history);
        for (i, (&a, &b)) in ours.iter().zip(&hf).enumerate() {
            assert!((a - b).abs() < 1e-5, "{p:?}: token {i}: ours {a}, HF {b}");
            // The masks agree: a token one side drops, the other gives (almost) nothing.
            assert!(
                a > 0.0 || b < 1e-12,
                "{p:?}: token {i} dropped, HF gives {b}"
            );
            assert!(
                b > 0.0 || a < 1e-12,
                "{p:?}: token {i} kept ({a}), HF drops it"
            );
        }
        let n = 20_000;
        let mut counts = vec![0usize; hf.len()];
        for _ in 0..n {
            let t = sampler.sample(&want_logits, &history) as usize;
            assert!(
                hf[t] > 0.0,
                "{p:?}: drew token {t}, which HF's filters drop"
            );
            counts[t] += 1;
        }
        let (chi, df) = chi_square(&counts, &hf, n);
        assert!(
            chi < chi_square_critical(df),
            "{p:?}: chi-square {chi:.1} with {df} degrees of freedom"
        );
        // The same seed draws the same tokens.
        let draw = |seed| {
            let mut s = Sampler::new(p.clone(), seed);
            (0..32)
                .map(|_| s.sample(&want_logits, &history))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
    }
}

#[test]
fn streaming_never_splits_a_character_and_adds_up_to_the_decode() {
    let Some(dir) = model_dir("streaming_never_splits_a_character_and_adds_up_to_the_decode")
    else {
        return;
    };
    let r = reference(&dir);
    let tk = TextTokenizer::from_dir(&dir).unwrap();
    let mut split = 0;
    let mut cases: Vec<Vec<u32>> = r["encode"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| ids(&c["ids"]))
        .collect();
    // The model's own outputs hold invalid byte sequences too (random weights).
    cases.extend(
        r["greedy"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| ids(&c["tokens"])),
    );
    for all in cases {
        let want = tk.decode(&all, true).unwrap();
        let mut stream = npu_text::TextStream::new();
        let mut got = String::new();
        for (i, &t) in all.iter().enumerate() {
            let piece = stream.push(&tk, t).unwrap();
            // A token alone that decodes to U+FFFD holds part of a character.
            if tk.decode(&[t], true).unwrap().contains('\u{FFFD}') {
                split += 1;
            }
            // Only a character that is invalid in the full decode may be a replacement.
            let so_far = tk.decode(&all[..=i], true).unwrap();
            assert!(
                !piece.contains('\u{FFFD}') || want.contains('\u{FFFD}'),
                "{piece:?} of {so_far:?}"
            );
            got += &piece;
            assert!(
                want.starts_with(&got),
                "{got:?} is not a prefix of {want:?}"
            );
        }
        got += &stream.finish(&tk).unwrap();
        assert_eq!(got, want);
    }
    assert!(split > 5, "the cases must split characters across tokens");
}

#[test]
fn template_constructs_render_like_jinja2_in_transformers() {
    let Some(dir) = model_dir("template_constructs_render_like_jinja2_in_transformers") else {
        return;
    };
    // Parsed straight into template values, so maps keep the key order Python wrote (tojson
    // writes them in that order).
    let text = std::fs::read_to_string(dir.join("text_reference.json")).unwrap();
    let r: minijinja::Value = serde_json::from_str(&text).unwrap();
    let cases = r.get_attr("templates").unwrap();
    let mut n = 0;
    for c in cases.try_iter().unwrap() {
        let get = |k: &str| c.get_attr(k).unwrap();
        let name = get("name").to_string();
        let special: std::collections::BTreeMap<String, String> = get("special_tokens")
            .try_iter()
            .unwrap()
            .map(|k| {
                let v = get("special_tokens").get_item(&k).unwrap().to_string();
                (k.to_string(), v)
            })
            .collect();
        let t = ChatTemplate::new(get("template").as_str().unwrap()).unwrap();
        let got = t
            .render_with(
                &get("messages"),
                get("add_generation_prompt").is_true(),
                &special,
                get("tools"),
            )
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(got, get("text").as_str().unwrap(), "{name}");
        n += 1;
    }
    assert!(n >= 4);
}
