"""Tokenizer files for a model directory.

- ``copy_tokenizer``: copies a Hugging Face tokenizer (``tokenizer.json``, ``tokenizer_config.json`` and, when
  present, ``chat_template.jinja``, ``special_tokens_map.json``, ``generation_config.json``) beside an
  export's programs and weights, so ``npu generate MODEL_DIR`` finds them.
- ``train_test_tokenizer``: a small byte-level BPE trained on a short built-in text with the ``tokenizers``
  library, Qwen2.5's pre-tokenizer (its split regex, then byte-level), its special tokens and a Qwen2.5-style
  chat template, saved by transformers. Its vocabulary is exactly ``vocab_size`` (256 = qwen2.5-tiny's), so
  every id a random-weight tiny model can emit decodes. Nothing is downloaded.

Run ``python -m npu_export.tokenizer --out DIR`` to write the test tokenizer.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

# Qwen2.5's tokenizer.json pre-tokenizer split pattern (the GPT-4 pattern with single digits).
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Qwen2.5-Instruct's chat template (tool calls included), written out here; the default system prompt is
# shortened so that rendered prompts fit the tiny model's cache.
CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" }}
    {{- "You are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments " }}
    {{- "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, " }}
    {{- "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first)
        or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content.strip() + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# The training text: English prose and code (most merges), a little French, German, Greek, Chinese and emoji,
# so that frequent multi-byte characters become tokens and rare ones stay split into byte tokens (what
# incremental UTF-8 decoding must handle).
TRAINING_TEXT = """\
The quick brown fox jumps over the lazy dog. A small model is trained on a short text, and it learns
which pairs of bytes appear together most often. Hello, world! How are you today? I am fine, thank you.
The compiler takes a graph, fuses the operations, plans the memory and writes a program for the device.
Tokens are pieces of words; the tokenizer turns text into tokens and tokens back into text.
def generate(model, prompt, steps):
    tokens = encode(prompt)
    for step in range(steps):
        logits = model(tokens)
        tokens.append(sample(logits))
    return decode(tokens)
Numbers: 0 1 2 3 4 5 6 7 8 9, 10, 42, 2024, 3.14159 and 1e-6.
Le café est très bon à Paris, où l'été est chaud. Ça va très bien, merci !
Grüße aus München: schöne Straßen, große Bäume und Brötchen.
Καλημέρα κόσμε. 你好，世界。我们的模型很小。 🙂 😀 🚀
She said: "it's the model's turn", and they'll see what we've done; I'd say you're right, I'm sure.
Questions? Answers! Lists: apples, bananas, cherries; tabs\tand\ttabs; new
lines and    spaces.
"""


def corpus_texts(roots: list[Path], max_bytes: int) -> list[str]:
    """The text of the ``.py``, ``.md``, ``.rst`` and ``.txt`` files under ``roots`` (sorted, so the same
    files give the same tokenizer), up to ``max_bytes``."""
    texts: list[str] = []
    total = 0
    for root in roots:
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for f in files:
            if f.suffix not in (".py", ".md", ".rst", ".txt") or not f.is_file():
                continue
            t = f.read_text(encoding="utf-8", errors="ignore")
            texts.append(t)
            total += len(t)
            if total >= max_bytes:
                return texts
    return texts


def train_test_tokenizer(
    out: Path, vocab_size: int = 256, corpus: list[Path] | None = None, max_mb: int = 64
) -> int:
    """Trains the test tokenizer and saves it with transformers into ``out`` (created); returns its size.

    Without ``corpus``, on the built-in text, to exactly ``vocab_size`` tokens. With one (local files: there
    is no download), to at most ``vocab_size``: a vocabulary the size of a real model's (Qwen2.5: 151665 of
    151936 logits), so a random-weight export of it prints text for most of the ids it emits."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    # No initial alphabet: only the bytes the text uses get a token, leaving room for merges in 256.
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=[], show_progress=False
    )
    if corpus:
        texts = corpus_texts(corpus, max_mb << 20)
        if not texts:
            raise SystemExit(f"no .py/.md/.rst/.txt files under {', '.join(map(str, corpus))}")
        tok.train_from_iterator([TRAINING_TEXT, *texts], trainer)
    else:
        lines = TRAINING_TEXT.splitlines(keepends=True)
        # The text a few times over, whole and line by line, so the merges are frequent enough to fill it.
        tok.train_from_iterator([TRAINING_TEXT] * 4 + lines, trainer)
        if tok.get_vocab_size() != vocab_size:
            raise RuntimeError(f"the test tokenizer has {tok.get_vocab_size()} tokens, not {vocab_size}")
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )
    out.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(out))
    # What a Qwen2.5-Instruct checkpoint says: generation ends at <|im_end|> or <|endoftext|>.
    ids = [tok.token_to_id(t) for t in ("<|im_end|>", "<|endoftext|>")]
    gen = {"eos_token_id": ids, "pad_token_id": tok.token_to_id("<|endoftext|>")}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    return int(tok.get_vocab_size())


# Files a Hugging Face checkpoint may hold for its tokenizer and generation settings.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
OPTIONAL_FILES = ("chat_template.jinja", "special_tokens_map.json", "generation_config.json")


def copy_tokenizer(src: Path, out: Path) -> list[str]:
    """Copies the tokenizer files of ``src`` into ``out``; returns the names copied."""
    missing = [f for f in TOKENIZER_FILES if not (src / f).is_file()]
    if missing:
        raise SystemExit(f"{src}: no {' or '.join(missing)} (a tokenizer directory needs both)")
    copied = []
    for name in (*TOKENIZER_FILES, *OPTIONAL_FILES):
        if (src / name).is_file():
            shutil.copyfile(src / name, out / name)
            copied.append(name)
    return copied


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="npu_export.tokenizer", description="Writes the small test tokenizer.")
    p.add_argument("--out", type=Path, required=True, help="output directory (created)")
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument(
        "--corpus",
        type=Path,
        nargs="+",
        default=None,
        help="train on these local files/folders (.py .md .rst .txt) instead of the built-in text, "
        "up to --vocab-size tokens (e.g. 151665 for a Qwen2.5-1.5B export)",
    )
    p.add_argument("--corpus-mb", type=int, default=64, help="read at most this many MB of the corpus")
    args = p.parse_args(argv)
    n = train_test_tokenizer(args.out, args.vocab_size, args.corpus, args.corpus_mb)
    print(f"wrote {args.out} ({n} tokens)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
