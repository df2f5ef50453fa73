//! Text in, text out through the `npu` binary, against Hugging Face on the same model: the
//! `qwen2.5-tiny-text` export of `scripts/make-test-models.sh` (`$NPU_TEST_MODELS`, default
//! `target/test-models`): qwen2.5-tiny's random weights, a small BPE trained with the
//! `tokenizers` library and a chat template, and `text_reference.json` with transformers'
//! greedy generations. A missing export is reported and skipped, or fails with
//! `NPU_REQUIRE_MODELS=1` (scripts/test.sh sets it).
//!
//! Every run compiles for the CPU in f32, where greedy decoding reproduces PyTorch's tokens.

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

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

/// A private copy of the export (the compile cache is written beside the graphs).
fn copy_dir(dir: &Path, tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("npu-text-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), d.join(e.file_name())).unwrap();
        }
    }
    d
}

/// Runs `npu` with `args` (CPU, f32) and `stdin`.
fn npu(args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_npu"));
    cmd.args(args)
        .args(["--target", "cpu", "--dtype", "f32"])
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(s) = stdin {
        child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn ok(args: &[&str], stdin: Option<&str>) -> (String, String) {
    let o = npu(args, stdin);
    let (out, err) = (
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    );
    assert!(o.status.success(), "npu {args:?} failed: {out}{err}");
    (out, err)
}

fn fails(args: &[&str], stdin: Option<&str>) -> String {
    let o = npu(args, stdin);
    assert!(!o.status.success(), "npu {args:?} should fail");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.starts_with("error: "), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

fn json(out: &str) -> Value {
    serde_json::from_str(out.trim_end()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// `npu generate` arguments for a reference greedy case.
fn case_args<'a>(dir: &'a str, c: &'a Value, n: &'a str) -> Vec<&'a str> {
    let mut a = vec!["generate", dir, "--prompt", c["prompt"].as_str().unwrap()];
    if let Some(s) = c["system"].as_str() {
        a.extend(["--chat", "--system", s]);
    }
    a.extend(["--max-new-tokens", n]);
    a
}

#[test]
fn greedy_text_equals_hf_generate_streamed_and_as_json() {
    let Some(dir) = model_dir("greedy_text_equals_hf_generate_streamed_and_as_json") else {
        return;
    };
    let r = reference(&dir);
    let d = dir.to_str().unwrap();
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    let s = meta["seq_len"].as_u64().unwrap() as usize;
    let eos: Vec<u64> = r["tokenizer"]["eos_token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    let cases = r["greedy"].as_array().unwrap();
    let (mut short, mut long, mut chat, mut at_eos) = (false, false, false, false);
    for c in cases {
        let n = c["max_new_tokens"].as_u64().unwrap().to_string();
        let name = c["name"].as_str().unwrap();
        let mut args = case_args(d, c, &n);
        let (streamed, err) = ok(&args, None);
        assert!(err.contains("tokens/s"), "{name}: {err}");
        args.push("--json");
        let (out, _) = ok(&args, None);
        let j = json(&out);
        let want_text = c["text"].as_str().unwrap();
        assert_eq!(j["tokens"], c["tokens"], "{name}: tokens");
        assert_eq!(j["text"].as_str().unwrap(), want_text, "{name}: text");
        assert_eq!(streamed, format!("{want_text}\n"), "{name}: streamed text");
        let p = c["ids"].as_array().unwrap().len();
        assert_eq!(j["prompt_tokens"].as_u64().unwrap() as usize, p, "{name}");
        short |= p < s;
        long |= p > 2 * s;
        chat |= c["system"].is_string();
        let last = c["tokens"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .as_u64()
            .unwrap();
        if eos.contains(&last) {
            at_eos = true;
            assert_eq!(j["finish_reason"], "eos", "{name}");
        } else {
            assert_eq!(j["finish_reason"], "length", "{name}");
        }
    }
    assert!(
        short && long && chat,
        "cases: a prompt shorter than the prefill ({s}), one over two chunks, a chat"
    );
    // Not an assertion on the model (random weights), but say when EOS was not exercised.
    if !at_eos {
        println!("note: no reference generation ended at EOS");
    }
}

#[test]
fn chat_keeps_the_cache_across_turns_and_answers_like_hf() {
    let Some(dir) = model_dir("chat_keeps_the_cache_across_turns_and_answers_like_hf") else {
        return;
    };
    let r = reference(&dir);
    let t = &r["chat_turns"];
    let users: Vec<&str> = t["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap())
        .collect();
    let replies: Vec<&str> = t["replies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap())
        .collect();
    let n = t["max_new_tokens"].as_u64().unwrap().to_string();
    // Two turns, a reset, the first turn again, an unknown command, the end.
    let input = format!(
        "{}\n{}\n/reset\n{}\n/nope\n/exit\nnever read\n",
        users[0], users[1], users[0]
    );
    let (out, err) = ok(
        &[
            "chat",
            dir.to_str().unwrap(),
            "--system",
            t["system"].as_str().unwrap(),
            "--max-new-tokens",
            &n,
        ],
        Some(&input),
    );
    assert_eq!(
        out,
        format!("{}\n{}\n{}\n", replies[0], replies[1], replies[0]),
        "{err}"
    );
    assert!(err.contains("reset"), "{err}");
    assert!(err.contains("unknown command /nope"), "{err}");
}

#[test]
fn sampling_with_a_seed_is_reproducible() {
    let Some(dir) = model_dir("sampling_with_a_seed_is_reproducible") else {
        return;
    };
    let d = dir.to_str().unwrap();
    let run = |seed: &str| {
        let args = [
            "generate",
            d,
            "--prompt",
            "Hello",
            "--temperature",
            "0.9",
            "--top-k",
            "50",
            "--top-p",
            "0.95",
            "--min-p",
            "0.02",
            "--repetition-penalty",
            "1.1",
            "--seed",
            seed,
            "--max-new-tokens",
            "20",
            "--json",
        ];
        json(&ok(&args, None).0)
    };
    let a = run("7");
    assert_eq!(a, {
        let mut b = run("7");
        // Timings differ from run to run; the rest must not.
        b["timings"] = a["timings"].clone();
        b
    });
    assert_eq!(a["seed"], 7);
    assert_ne!(a["tokens"], run("8")["tokens"]);
}

#[test]
fn stop_strings_are_cut_and_prompts_come_from_files_and_stdin() {
    let Some(dir) = model_dir("stop_strings_are_cut_and_prompts_come_from_files_and_stdin") else {
        return;
    };
    let r = reference(&dir);
    let d = dir.to_str().unwrap();
    let c = r["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "long")
        .unwrap();
    let text = c["text"].as_str().unwrap();
    let prompt = c["prompt"].as_str().unwrap();
    // A stop string from the middle of the text, spanning characters that several tokens make.
    let chars: Vec<char> = text.chars().collect();
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 3].iter().collect();
    let cut = &text[..text.find(&stop).unwrap()];
    let (out, _) = ok(&["generate", d, "--prompt", prompt, "--stop", &stop], None);
    assert_eq!(out, format!("{cut}\n"));
    let (out, _) = ok(
        &[
            "generate", d, "--prompt", prompt, "--stop", &stop, "--stop", "never", "--json",
        ],
        None,
    );
    let j = json(&out);
    assert_eq!(
        (j["text"].as_str().unwrap(), &j["finish_reason"]),
        (cut, &Value::from("stop"))
    );

    let n = c["max_new_tokens"].as_u64().unwrap().to_string();
    let file = std::env::temp_dir().join(format!("npu-prompt-{}.txt", std::process::id()));
    std::fs::write(&file, prompt).unwrap();
    let (from_file, _) = ok(
        &[
            "generate",
            d,
            "--prompt-file",
            file.to_str().unwrap(),
            "--max-new-tokens",
            &n,
        ],
        None,
    );
    let (from_stdin, _) = ok(&["generate", d, "--max-new-tokens", &n], Some(prompt));
    let (from_dash, _) = ok(
        &["generate", d, "--prompt-file", "-", "--max-new-tokens", &n],
        Some(prompt),
    );
    assert_eq!(from_file, format!("{text}\n"));
    assert_eq!(from_stdin, from_file);
    assert_eq!(from_dash, from_file);
    std::fs::remove_file(&file).ok();
}

#[test]
fn graphs_compile_on_first_use_and_the_cache_is_reused() {
    let Some(dir) = model_dir("graphs_compile_on_first_use_and_the_cache_is_reused") else {
        return;
    };
    let d = copy_dir(&dir, "cache");
    let ds = d.to_str().unwrap();
    let args = ["generate", ds, "--prompt", "Hi!", "--max-new-tokens", "8"];
    let (first, err) = ok(&args, None);
    assert_eq!(err.matches("compiled").count(), 2, "{err}");
    let cache = d.join(".npu-cache");
    let files = || {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        v
    };
    assert_eq!(files().len(), 2);
    let (again, err) = ok(&args, None);
    assert_eq!(again, first);
    assert!(!err.contains("compiled"), "{err}");
    // A damaged cached program is compiled again, not an error.
    std::fs::write(&files()[0], b"NPUBIN\0\0junk").unwrap();
    let (third, err) = ok(&args, None);
    assert_eq!(third, first);
    assert_eq!(err.matches("compiled").count(), 1, "{err}");
    // Other options, other programs.
    let o = Command::new(env!("CARGO_BIN_EXE_npu"))
        .args(args)
        .args(["--target", "cpu", "--dtype", "bf16"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(files().len(), 4);
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn mistakes_get_one_clear_line() {
    let Some(dir) = model_dir("mistakes_get_one_clear_line") else {
        return;
    };
    let d = dir.to_str().unwrap();
    let g = |extra: &[&str]| {
        let mut a = vec!["generate", d];
        a.extend_from_slice(extra);
        fails(&a, None)
    };
    assert!(g(&["--prompt", ""]).contains("the prompt is empty"));
    // No prompt option and an empty stdin (not a terminal, so it is read).
    assert!(g(&[]).contains("the prompt is empty"));
    assert!(g(&["--prompt", "Hi", "--max-new-tokens", "1000"])
        .contains("exceed the cache of 128 slots"));
    let huge = "The quick brown fox. ".repeat(40);
    assert!(g(&["--prompt", &huge]).contains("does not fit"));
    assert!(g(&["--prompt", "Hi", "--stop", ""]).contains("empty"));
    assert!(g(&["--prompt", "Hi", "--temperature", "-1"]).contains("--temperature"));
    assert!(g(&["--prompt", "Hi", "--top-p", "0"]).contains("--top-p"));
    assert!(g(&["--prompt-ids", "1,-5"]).contains("-5"));
    assert!(g(&["--prompt-ids", "1,99999"]).contains("99999"));
    assert!(g(&["--prompt-file", "/nonexistent/prompt.txt"]).contains("/nonexistent/prompt.txt"));

    // No tokenizer: the directory is named, with what to do.
    let bare = copy_dir(&dir, "bare");
    std::fs::remove_file(bare.join("tokenizer.json")).unwrap();
    let e = fails(
        &["generate", bare.to_str().unwrap(), "--prompt", "Hi"],
        None,
    );
    assert!(
        e.contains("no tokenizer") && e.contains("--tokenizer"),
        "{e}"
    );
    // ... which --tokenizer DIR supplies.
    let (out, _) = ok(
        &[
            "generate",
            bare.to_str().unwrap(),
            "--tokenizer",
            d,
            "--prompt",
            "Hi!",
            "--max-new-tokens",
            "4",
        ],
        None,
    );
    assert!(!out.is_empty());
    // No chat template.
    std::fs::copy(dir.join("tokenizer.json"), bare.join("tokenizer.json")).unwrap();
    std::fs::remove_file(bare.join("chat_template.jinja")).unwrap();
    let e = fails(
        &[
            "generate",
            bare.to_str().unwrap(),
            "--prompt",
            "Hi",
            "--chat",
        ],
        None,
    );
    assert!(e.contains("no chat template"), "{e}");
    let e = fails(&["chat", bare.to_str().unwrap()], Some("Hi\n"));
    assert!(e.contains("no chat template"), "{e}");
    std::fs::remove_dir_all(&bare).ok();
    let e = fails(&["generate", "/nonexistent/model", "--prompt", "Hi"], None);
    assert!(e.contains("/nonexistent/model"), "{e}");
}

/// The tokens of `text` rendered as a chat turn after the `system` message.
fn chat_tokens(dir: &Path, system: &str, text: &str) -> usize {
    let tk = npu_text::TextTokenizer::from_dir(dir).unwrap();
    let t = npu_text::ChatTemplate::new(tk.chat_template().unwrap()).unwrap();
    let m = [
        npu_text::Message::new("system", system),
        npu_text::Message::new("user", text),
    ];
    let r = t.render(&m, true, tk.special_tokens()).unwrap();
    tk.encode(&r, false).unwrap().len()
}

#[test]
fn a_full_cache_is_said_and_reset_frees_it() {
    let Some(dir) = model_dir("a_full_cache_is_said_and_reset_frees_it") else {
        return;
    };
    let d = dir.to_str().unwrap();
    // A first message that leaves a few slots of the 128: whatever the reply, the next
    // message cannot fit.
    let mut big = String::new();
    while chat_tokens(&dir, "Be brief.", &format!("{big}The quick brown fox. ")) <= 120 {
        big += "The quick brown fox. ";
    }
    let used = chat_tokens(&dir, "Be brief.", &big);
    let input = format!("{big}\nAnd then? Tell me more about it, please.\n/reset\nHi!\n");
    let (out, err) = ok(&["chat", d, "--system", "Be brief."], Some(&input));
    assert!(
        err.contains("cache slots and the KV cache holds 128: /reset to start over"),
        "{err}"
    );
    // Three replies: the first (cut by the full cache, or ended by EOS), none for the
    // message that did not fit, one after the reset.
    assert!(out.lines().count() >= 2, "{out}");
    assert!(err.contains("[conversation reset]"));

    // The same prompt through `generate`: it stops when no slot is left for the next token.
    let (out, _) = ok(
        &[
            "generate",
            d,
            "--chat",
            "--system",
            "Be brief.",
            "--prompt",
            &big,
            "--json",
        ],
        None,
    );
    let j = json(&out);
    let n = j["tokens"].as_array().unwrap().len();
    match j["finish_reason"].as_str().unwrap() {
        "cache_full" => assert_eq!(n, 128 - used + 1),
        "eos" => assert!(n <= 128 - used + 1),
        other => panic!("finish {other}"),
    }
}
