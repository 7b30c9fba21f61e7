"""Small model folders built in code for the chat log tests: a byte-level BPE tokenizer
trained on a few sentences, the special tokens of Qwen2.5 or Llama 3, and the real chat
template (tests/fixtures/chat_templates). `tools/chat_reference/chat_reference_ids.py` builds
the same folders and renders the same CONVERSATIONS with transformers (the reference ids)."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TEMPLATES = FIXTURES / "chat_templates"
REFERENCE = FIXTURES / "chat_reference_ids.json"
SENTENCES = [
    "The cache keeps the prefix of every prompt it has seen.",
    "A system prompt is shared by every request of a tenant.",
    "What is the weather in Paris today? It is sunny and warm.",
    "Call the tool get_weather with the city as its argument.",
    "Tokens are counted in blocks of sixteen; a block is hit or missed whole.",
    "You are a helpful assistant. Answer briefly and exactly.",
]
DATE = {"date_string": "26 Jul 2024"}  # the Llama template reads the date otherwise
MODELS = {
    # name: (template file, special tokens, tokenizer_config.json's own keys, BOS post-processor)
    "qwen": (
        "qwen2.5-instruct.jinja",
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        None,
    ),
    "llama": (
        "llama3.2-instruct.jinja",
        [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
        ],  # fmt: skip
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        "<|begin_of_text|>",
    ),
    # add_bos_token/add_eos_token in the config: transformers' generic fast tokenizer keeps
    # tokenizer.json's post-processor (no BOS, no EOS), and so does hpa.
    "flags": (
        "qwen2.5-instruct.jinja",
        ["<s>", "</s>", "<|im_start|>", "<|im_end|>"],
        {
            "bos_token": {"__type": "AddedToken", "content": "<s>", "special": True},
            "eos_token": "</s>",
            "add_bos_token": True,
            "add_eos_token": True,
        },
        None,
    ),
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "What is the weather in Paris today?"}]},
    {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
            {"role": "user", "content": "What is a prefix cache?"},
            {"role": "assistant", "content": "It keeps the prefix of every prompt."},
            {"role": "user", "content": "And a block?"},
        ]
    },
    {
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24 C"},
        ],
        "tools": TOOLS,
    },
    {"messages": [{"role": "user", "content": "Ünïcödé: 東京 — ok? ✓"}], "tools": TOOLS},
]
PROMPTS = ["The cache keeps the prefix", "Ünïcödé prompt: 東京"]


def train_tokenizer(special: list[str], bos: str | None):
    """A byte-level BPE tokenizer trained on SENTENCES (deterministic), with `special`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(SENTENCES, trainer)
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A",
            pair=f"{bos} $A {bos} $B",
            special_tokens=[(bos, tok.token_to_id(bos))],
        )
    return tok


def model_folder(root: Path, name: str) -> Path:
    """Model folder `name` of MODELS under `root`: tokenizer.json, tokenizer_config.json."""
    template, special, config, bos = MODELS[name]
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    train_tokenizer(special, bos).save(str(folder / "tokenizer.json"))
    config = {**config, "chat_template": (TEMPLATES / template).read_text(encoding="utf-8")}
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return folder


def template_kwargs(name: str) -> dict:
    return DATE if name == "llama" else {}
