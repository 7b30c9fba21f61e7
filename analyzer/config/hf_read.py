"""Reading a Hugging Face `config.json`: its architecture family (or a one-line ConfigError
naming the field hpa cannot read), its language model's fields (`text_config` where there is
one), its dtype as vLLM 0.33 serves it, and the `Layer` record the families' plans are made of
(`hf_layers`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzer.errors import ConfigError

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 2, "float": 2}

# architectures[0] -> family; model_type as the fallback.
ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "llama",
    "Qwen3ForCausalLM": "llama",
    "MixtralForCausalLM": "llama",
    "Qwen3MoeForCausalLM": "llama",
    "GptOssForCausalLM": "gpt_oss",
    "Gemma3ForCausalLM": "gemma3",
    "Gemma3ForConditionalGeneration": "gemma3",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "Qwen3NextForCausalLM": "qwen3_next",
    "Qwen3_5ForConditionalGeneration": "qwen3_5",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_5",
    "Qwen3_5ForCausalLM": "qwen3_5",
    "Qwen3_5MoeForCausalLM": "qwen3_5",
    "NemotronHForCausalLM": "nemotron_h",
    "GraniteMoeHybridForCausalLM": "granite_hybrid",
    "JambaForCausalLM": "jamba",
    "FalconH1ForCausalLM": "falcon_h1",
}
MODEL_TYPES = {
    "llama": "llama", "mistral": "llama", "qwen2": "llama", "qwen3": "llama",
    "mixtral": "llama", "qwen3_moe": "llama", "gpt_oss": "gpt_oss", "gemma3": "gemma3",
    "gemma3_text": "gemma3", "deepseek_v3": "deepseek_v3", "qwen3_next": "qwen3_next",
    "qwen3_5": "qwen3_5", "qwen3_5_moe": "qwen3_5", "nemotron_h": "nemotron_h",
    "granitemoehybrid": "granite_hybrid", "jamba": "jamba", "falcon_h1": "falcon_h1",
}  # fmt: skip


@dataclass(frozen=True)
class Layer:
    """One decoder layer: its token mixers ("full", "sliding", "mla", "mamba1", "mamba2",
    "gdn"; Falcon-H1 has two side by side) and its feed-forward ("dense", "moe", "")."""

    mixers: tuple[str, ...]
    ffn: str


class HfConfig:
    """A config.json, read: `top` the whole object, `text` its language model's part
    (`text_config` where there is one). `need` names the field it cannot read."""

    def __init__(self, path: Path, top: dict[str, Any]):
        self.path, self.top = path, top
        text = top.get("text_config")
        self.text: dict[str, Any] = text if isinstance(text, dict) else top
        self.prefix = "text_config." if self.text is not top else ""
        self.architecture, self.family = _family(path, top)

    def fail(self, field: str, why: str) -> ConfigError:
        return ConfigError(f"model file {self.path}: cannot read field {field!r} ({why})")

    def need(self, key: str, kind: type = int) -> Any:
        value = self.text.get(key)
        ok = isinstance(value, kind) and not isinstance(value, bool)
        if kind is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        if value is None or not ok:
            why = "missing" if value is None else f"expected {kind.__name__}, got {value!r}"
            raise self.fail(self.prefix + key, why)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        value = self.text.get(key)
        return default if value is None else value

    def first(self, *keys: str, kind: type = int) -> Any:
        """The first of `keys` the config has (the field named in an error is the first)."""
        for key in keys:
            if self.text.get(key) is not None:
                return self.need(key, kind)
        return self.need(keys[0], kind)

    def dtype_name(self) -> str:
        for where in (self.text, self.top):
            for key in ("torch_dtype", "dtype"):
                if isinstance(where.get(key), str):
                    return where[key]
        return "bfloat16"

    def dtype_bytes(self) -> int:
        """vLLM's model dtype: the config's, float32 served as bfloat16 (`dtype=auto`)."""
        name = self.dtype_name()
        if name not in DTYPE_BYTES:
            raise self.fail("torch_dtype", f"unknown dtype {name!r}")
        return DTYPE_BYTES[name]


def _family(path: Path, top: dict[str, Any]) -> tuple[str, str]:
    archs = top.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    if arch in ARCHITECTURES:
        return arch, ARCHITECTURES[arch]
    model_type = top.get("model_type")
    if arch is None and model_type in MODEL_TYPES:
        return str(model_type), MODEL_TYPES[model_type]
    what = f"architectures[0] {arch!r}" if arch else f"model_type {model_type!r}"
    field = "architectures" if arch else "model_type"
    raise ConfigError(
        f"model file {path}: cannot read field {field!r} ({what} is not an architecture hpa "
        f"knows; known: {', '.join(sorted(ARCHITECTURES))})"
    )


def is_hf_config(data: Any) -> bool:
    """A Hugging Face config.json (`architectures` or `model_type`), not a preset layout."""
    return (
        isinstance(data, dict)
        and "block_size" not in data
        and ("architectures" in data or "model_type" in data)
    )


def kv_heads(cfg: HfConfig) -> int:
    if cfg.get("num_key_value_heads") is None:
        return cfg.need("num_attention_heads")
    return cfg.need("num_key_value_heads")


def head_dim(cfg: HfConfig) -> int:
    explicit = cfg.get("head_dim") or cfg.get("attention_head_dim")
    if explicit is not None:
        return cfg.first("head_dim", "attention_head_dim")
    return cfg.need("hidden_size") // cfg.need("num_attention_heads")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"model file {path}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ConfigError(f"model file {path}: not JSON ({exc})") from None
