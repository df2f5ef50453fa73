"""Text-level reference data for an export that carries a tokenizer: ``text_reference.json``.

What the Rust side must reproduce, computed here with the real libraries (transformers' tokenizer over
the ``tokenizers`` library, jinja2 through ``apply_chat_template``, Hugging Face ``generate`` and its logits
processors):

- ``encode``: ids of a set of strings (multi-byte UTF-8, special tokens, whitespace runs, characters the
  vocabulary lacks) and their decodes, with and without special tokens;
- ``chat``: rendered chat prompts (``apply_chat_template(..., tokenize=False)``) and their ids;
- ``greedy``: ``model.generate(do_sample=False)`` on text prompts (shorter and longer than the prefill graph)
  and on a chat prompt, with the new ids and their decode (``skip_special_tokens=True``);
- ``sampling``: the last-position logits of one prompt and, for several settings, the distribution Hugging
  Face's processors give (repetition penalty, temperature, top-k, top-p, min-p, in that order, then softmax).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, GenerationConfig, PreTrainedModel
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from . import common

FILE = "text_reference.json"

ENCODE_CASES = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "Le café est très bon à Paris, où l'été est chaud.",
    "你好，世界。 🙂 😀 🚀",
    "Grüße aus München: große Bäume",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\nnew\n\nlines\r\n",
    "it's, we'll, they've, I'd, you're",
    "numbers 3.14159 and 2024-11-24",
    "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "characters the vocabulary lacks: Ω 𝄞 ж",
    "",
]

SYSTEM = "Be brief."
CHAT_CASES: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "Hi!"}], "add_generation_prompt": True},
    {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "  What is 2+2?  "}],
        "add_generation_prompt": True,
    },
    {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello! How are you?"},
            {"role": "user", "content": "Fine, thanks. Tell me about Paris."},
        ],
        "add_generation_prompt": True,
    },
    {
        "messages": [
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello, world!"},
        ],
        "add_generation_prompt": False,
    },
]

# Templates that exercise what real chat templates use (Llama 3 and Mistral style: namespace, tools and
# tojson(indent), filters and tests, Python string methods, dict literals, raise_exception not taken, plain
# blocks under trim_blocks/lstrip_blocks), rendered by apply_chat_template(chat_template=...).
LLAMA_STYLE = r"""{{- bos_token }}
{%- set ns = namespace(system="", has_tools=tools is not none) %}
{%- if messages[0]['role'] == 'system' %}
    {%- set ns.system = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if ns.has_tools %}
    {{- "Tools:\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- ns.system ~ "<|eot_id|>" }}
{%- for message in messages %}
    {%- if message.role not in ['user', 'assistant'] %}
        {{- raise_exception('Unknown role: ' ~ message.role) }}
    {%- endif %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim }}
    {{- '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""
MISTRAL_STYLE = r"""{%- set users = messages | selectattr('role', 'equalto', 'user')
    | map(attribute='content') | list %}
{{- bos_token }}[{{ users | length }} user turns: {{ users | join(' / ') }}]
{%- for message in messages %}
    {%- if message.content is string and message.content.startswith('#') %}
        {{- ' [heading]' }}
    {%- endif %}
    {%- if message.role == 'user' %}
        {{- ' [INST] ' + message.content.strip().split(' ')[0] | upper }}
        {{- ' ' + message.content.strip() + ' [/INST]' }}
    {%- elif message.role == 'assistant' %}
        {{- ' ' + message.content.strip() + eos_token if loop.last else ' ' + message.content.strip() }}
    {%- endif %}
{%- endfor %}
{%- for k, v in {'b': [true, none, 2.5, 'x"y'], 'a': {'z': 1, 'c': -3}}.items() %} {{ k }}={{ v | tojson }}
{%- endfor %}
"""
PLAIN_BLOCKS = """{% for m in messages %}
    {% if loop.first %}<first of {{ loop.length }}>{% endif %}
<{{ m.role }}>{{ m.content }}</{{ m.role }}>{{ '\n' if not loop.last }}
{% endfor %}
{% if add_generation_prompt %}
  <assistant>
{% endif %}
"""
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": 'The weather in a city, "now".',
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
                "required": ["city"],
            },
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "  You are terse.  "},
    {"role": "user", "content": "# Hello there, model"},
    {"role": "assistant", "content": " Hi! "},
    {"role": "user", "content": "Weather in Paris, café au lait?"},
]
TEMPLATE_CASES: list[tuple[str, str, bool, bool]] = [
    # (name, template, with tools, add_generation_prompt)
    ("llama-style, tools", LLAMA_STYLE, True, True),
    ("llama-style", LLAMA_STYLE, False, False),
    ("mistral-style", MISTRAL_STYLE, False, True),
    ("plain blocks", PLAIN_BLOCKS, False, True),
]

SHORT_PROMPT = "Hi!"
LONG_PROMPT = "The quick brown fox jumps over the lazy dog, and the compiler writes a program for the device."
CHAT_PROMPT = "Hi! Tell me a story."
CHAT_FOLLOW_UP = "And then?"
NEW_TOKENS = 24

# (temperature, top_k, top_p, min_p, repetition_penalty); history = the prompt ids when a penalty is set.
SAMPLING_CASES = [
    (1.0, 0, 1.0, 0.0, 1.0),
    (0.7, 20, 1.0, 0.0, 1.0),
    (1.3, 0, 0.9, 0.0, 1.0),
    (1.0, 0, 1.0, 0.1, 1.0),
    (0.9, 50, 0.8, 0.05, 1.3),
    (0.5, 3, 1.0, 0.0, 1.0),
]


def eos_token_ids(out: Path, tok: Any) -> list[int]:
    """The ids that end generation: generation_config.json's eos_token_id if present, else the tokenizer's."""
    gen = out / "generation_config.json"
    if gen.is_file():
        e = json.loads(gen.read_text()).get("eos_token_id")
        if e is not None:
            return [int(x) for x in (e if isinstance(e, list) else [e])]
    return [] if tok.eos_token_id is None else [int(tok.eos_token_id)]


def _budget(ids: list[int], max_len: int) -> int:
    """New tokens for a prompt: NEW_TOKENS, or fewer when the cache (max_len slots) is short."""
    return min(NEW_TOKENS, max_len - len(ids) + 1)


def _generate(model: PreTrainedModel, ids: list[int], eos: list[int], pad: int, max_len: int) -> list[int]:
    new = _budget(ids, max_len)
    gc = GenerationConfig(
        do_sample=False, max_new_tokens=new, eos_token_id=eos or None, pad_token_id=pad, bos_token_id=None
    )
    prompt = torch.tensor([ids], dtype=torch.int64)
    with torch.no_grad():
        seq = model.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=gc)
    return [int(t) for t in seq[0, len(ids) :]]


def _chat_turns(model: PreTrainedModel, tok: Any, eos: list[int], pad: int, max_len: int) -> dict[str, Any]:
    """Two turns of a conversation, each generated from the whole rendered conversation so far (what
    ``npu chat`` must print while it keeps the KV cache between turns)."""
    messages = [{"role": "system", "content": SYSTEM}]
    replies = []
    for user in (CHAT_PROMPT, CHAT_FOLLOW_UP):
        messages.append({"role": "user", "content": user})
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        new = _generate(model, tok.encode(text, add_special_tokens=False), eos, pad, max_len)
        reply = tok.decode(new, skip_special_tokens=True)
        replies.append(reply)
        messages.append({"role": "assistant", "content": reply})
    return {
        "system": SYSTEM,
        "users": [CHAT_PROMPT, CHAT_FOLLOW_UP],
        "max_new_tokens": NEW_TOKENS,
        "replies": replies,
    }


def _processors(t: float, k: int, p: float, min_p: float, rep: float) -> LogitsProcessorList:
    """Hugging Face's processors for these settings, in the order generate() applies them."""
    procs = LogitsProcessorList()
    if rep != 1.0:
        procs.append(RepetitionPenaltyLogitsProcessor(penalty=rep))
    if t != 1.0:
        procs.append(TemperatureLogitsWarper(t))
    if k != 0:
        procs.append(TopKLogitsWarper(top_k=k))
    if p < 1.0:
        procs.append(TopPLogitsWarper(top_p=p))
    if min_p > 0.0:
        procs.append(MinPLogitsWarper(min_p=min_p))
    return procs


def write(model: PreTrainedModel, out: Path, max_len: int, with_model: bool = True) -> dict[str, Any]:
    """Writes ``out/text_reference.json`` for the tokenizer files in ``out`` (and ``model``'s outputs)."""
    tok = AutoTokenizer.from_pretrained(str(out))
    eos = eos_token_ids(out, tok)
    ref: dict[str, Any] = {
        "tokenizer": {"vocab_size": len(tok), "eos_token_ids": eos, "eos_token": tok.eos_token},
        "encode": [],
        "chat": [],
    }
    for text in ENCODE_CASES:
        ids = tok.encode(text)
        ref["encode"].append(
            {
                "text": text,
                "ids": ids,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
            }
        )
    has_template = tok.chat_template is not None
    if has_template:
        for case in CHAT_CASES:
            text = tok.apply_chat_template(
                case["messages"], tokenize=False, add_generation_prompt=case["add_generation_prompt"]
            )
            ref["chat"].append({**case, "text": text, "ids": tok.encode(text, add_special_tokens=False)})
    ref["templates"] = []
    for name, template, with_tools, gen in TEMPLATE_CASES:
        messages = CONVERSATION if name != "mistral-style" else CONVERSATION[1:]
        text = tok.apply_chat_template(
            messages,
            chat_template=template,
            tools=TOOLS if with_tools else None,
            tokenize=False,
            add_generation_prompt=gen,
            bos_token="<s>",
            eos_token="</s>",
        )
        ref["templates"].append(
            {
                "name": name,
                "template": template,
                "messages": messages,
                "tools": TOOLS if with_tools else None,
                "add_generation_prompt": gen,
                "special_tokens": {"bos_token": "<s>", "eos_token": "</s>"},
                "text": text,
            }
        )
    if with_model:
        pad = tok.pad_token_id if tok.pad_token_id is not None else (eos[0] if eos else 0)
        prompts: list[dict[str, Any]] = [
            {"name": "short", "prompt": SHORT_PROMPT, "ids": tok.encode(SHORT_PROMPT)},
            {"name": "long", "prompt": LONG_PROMPT, "ids": tok.encode(LONG_PROMPT)},
        ]
        if has_template:
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": CHAT_PROMPT}]
            text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            prompts.append(
                {
                    "name": "chat",
                    "prompt": CHAT_PROMPT,
                    "system": SYSTEM,
                    "ids": tok.encode(text, add_special_tokens=False),
                }
            )
        ref["greedy"] = []
        for p in prompts:
            new = _generate(model, p["ids"], eos, pad, max_len)
            text = tok.decode(new, skip_special_tokens=True)
            ref["greedy"].append(
                {**p, "max_new_tokens": _budget(p["ids"], max_len), "tokens": new, "text": text}
            )
        if has_template:
            ref["chat_turns"] = _chat_turns(model, tok, eos, pad, max_len)
        ids = tok.encode(LONG_PROMPT)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].float()
        cases = []
        for t, k, p, min_p, rep in SAMPLING_CASES:
            history = ids if rep != 1.0 else []
            scores = _processors(t, k, p, min_p, rep)(torch.tensor([history or [0]]), logits[None].clone())
            probs = torch.softmax(scores[0], dim=-1)
            cases.append(
                {
                    "temperature": t,
                    "top_k": k,
                    "top_p": p,
                    "min_p": min_p,
                    "repetition_penalty": rep,
                    "history": history,
                    "probs": probs.tolist(),
                }
            )
        ref["sampling"] = {"prompt_ids": ids, "logits": logits.tolist(), "cases": cases}
    common.write_json(ref, out / FILE)
    return ref
