"""A model from its Hugging Face `config.json`: what vLLM 0.33 derives for it (cache groups,
block size, bytes per block and per state, KV bytes per token) and its compute figures
(`ModelFigures`), in the model presets' layout (`analyzer/schemas/models/*.json`).

What vLLM does, and where (vLLM 0.33; docs/models.md has the worked numbers):

- Layer kinds from the config: `layer_types`, `hybrid_override_pattern`,
  `full_attention_interval`, `attn_layer_period`/`attn_layer_offset`, Gemma 3's
  `sliding_window_pattern` (each model's `vllm/model_executor/models/<model>.py`).
- KV bytes per token per layer: `AttentionSpec.page_size_bytes` at block 1 =
  2 x KV heads x head dim x dtype bytes; MLA (`MLAAttentionSpec`): one latent of
  (kv_lora_rank + qk_rope_head_dim) x dtype bytes (`vllm/v1/kv_cache_interface.py`).
- State shapes: `MambaStateShapeCalculator` (`vllm/model_executor/layers/mamba/mamba_utils.py`):
  Mamba2 conv (d_inner + 2 x groups x d_state) x (kernel - 1), SSM heads x head dim x d_state;
  Mamba1 conv d_inner x (kernel - 1), SSM d_inner x d_state; GDN conv (2 x key heads x key dim
  + value heads x value dim) x (kernel - 1), SSM value heads x value dim x key dim. The conv
  state takes the model dtype; the SSM state `mamba_ssm_cache_dtype` (`auto`: the model dtype),
  which `NemotronHForCausalLMConfig` sets from the config or to float32, and
  `Qwen3_5ForConditionalGenerationConfig` from `mamba_ssm_dtype` (`models/config.py`).
- Block size: `Platform._align_hybrid_block_size` (`vllm/platforms/interface.py`, formerly
  `HybridAttentionMambaModelConfig.verify_and_update_config`): 16 x cdiv(state page,
  16 x attention page of one token); the state page is padded to the attention page. Without
  a recurrent layer the block stays the backend's: 16, or 64 for MLA (FlashMLA, Hopper).
- Groups: `_get_kv_cache_groups_uniform_page_size` (`vllm/v1/core/kv_cache_utils.py`): layers
  bucketed by spec, group size the smallest bucket (the largest when it is < 1.5 x the
  smallest), each bucket in cdiv(count, group size) groups; a pool block spans one group.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analyzer.config.hf_layers import ffn_figures, plan, state_shapes
from analyzer.config.hf_params import count_params
from analyzer.config.hf_read import HfConfig, Layer, head_dim, kv_heads
from analyzer.config.model_figures import ModelFigures

ALIGN_TOKENS = 16  # the smallest kernel block size of vLLM's CUDA attention backends
MLA_BLOCK_TOKENS = 64  # FlashMLA's block size (Hopper); CUTLASS MLA on Blackwell takes 128
STATE_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
GROUPS = ("full_attention", "sliding_window", "mamba")


def layer_plan(cfg: HfConfig) -> list[Layer]:
    """Each decoder layer's mixers and feed-forward, as the family's vLLM model builds it."""
    return plan(cfg)


def derive_model(
    path: Path, top: dict[str, Any], *, mamba_ssm_cache_dtype: str = "auto"
) -> dict[str, Any]:
    """The preset-layout dict vLLM 0.33's defaults give for config.json `top` (read from
    `path`), `figures` included. `mamba_ssm_cache_dtype` is vLLM's flag of that name."""
    cfg = HfConfig(path, top)
    layers = layer_plan(cfg)
    counts = {g: 0 for g in GROUPS}
    for layer in layers:
        for mixer in layer.mixers:
            counts[_group_of(mixer)] += 1
    if counts["full_attention"] == 0:
        raise cfg.fail("num_hidden_layers", "no full-attention layer: hpa needs one")
    kv_per_token = kv_bytes_per_token_per_layer(cfg, layers)
    state = state_bytes_per_layer(cfg, layers, mamba_ssm_cache_dtype) if counts["mamba"] else 0
    block = hybrid_block_size(kv_per_token, state) if state else _plain_block(layers)
    present = [g for g in GROUPS if counts[g]]
    group_size = kv_group_size([counts[g] for g in present])
    per_block = group_size * block * kv_per_token
    params = count_params(cfg, layers)
    figures = _figures(cfg, layers, counts, kv_per_token, state, params)
    model: dict[str, Any] = {
        "name": _name(path),
        "description": f"{cfg.architecture} from {path.name}, TP1, vLLM 0.33's defaults",
        "block_size": block,
        "groups": present,
        "num_full_attention_layers": counts["full_attention"],
        "num_sliding_window_layers": counts["sliding_window"],
        "num_mamba_layers": counts["mamba"],
        "kv_bytes_per_token_per_layer": kv_per_token,
        "num_groups": {g: -(-counts[g] // group_size) for g in present},
        "layers_per_group": group_size,
        "bytes_per_block": per_block,
        "weights_bytes": figures.weights_bytes,
        "source": f"derived from {path} by analyzer.config.hf_config (docs/models.md)",
        "figures": figures.as_dict(),
    }
    if counts["sliding_window"]:
        model["sliding_window"] = figures.sliding_window
    if state:
        model["mamba_state_bytes_per_layer"] = state
        model["bytes_per_state"] = model["num_groups"]["mamba"] * per_block
    return model


def _group_of(mixer: str) -> str:
    return {"full": "full_attention", "mla": "full_attention", "sliding": "sliding_window"}.get(
        mixer, "mamba"
    )


def _name(path: Path) -> str:
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


def _plain_block(layers: list[Layer]) -> int:
    return MLA_BLOCK_TOKENS if any("mla" in layer.mixers for layer in layers) else ALIGN_TOKENS


def hybrid_block_size(attention_bytes_per_token: int, state_bytes: int) -> int:
    """vLLM's attention block for a hybrid model: the smallest multiple of 16 tokens whose
    attention page holds one recurrent state."""
    unit = ALIGN_TOKENS * attention_bytes_per_token
    return ALIGN_TOKENS * -(-state_bytes // unit)


def kv_group_size(layer_counts: list[int]) -> int:
    """Layers per KV-cache group (`_get_kv_cache_groups_uniform_page_size`)."""
    smallest, largest = min(layer_counts), max(layer_counts)
    return largest if largest < smallest * 1.5 else smallest


def kv_bytes_per_token_per_layer(cfg: HfConfig, layers: list[Layer]) -> int:
    """One attention layer's KV bytes per token (MLA: the latent and the rope key)."""
    dtype = cfg.dtype_bytes()
    if any("mla" in layer.mixers for layer in layers):
        return (cfg.need("kv_lora_rank") + cfg.need("qk_rope_head_dim")) * dtype
    return 2 * kv_heads(cfg) * head_dim(cfg) * dtype


def state_bytes_per_layer(cfg: HfConfig, layers: list[Layer], override: str = "auto") -> int:
    """One recurrent layer's state (conv + SSM), in the dtypes vLLM 0.33 gives them."""
    conv_elements, ssm_elements = state_shapes(cfg, layers)
    conv = cfg.dtype_bytes()
    return conv_elements * conv + ssm_elements * ssm_state_bytes(cfg, override)


def ssm_state_bytes(cfg: HfConfig, override: str = "auto") -> int:
    """Bytes per SSM state element: `--mamba-ssm-cache-dtype`, else the model's rule."""
    name = override
    if name == "auto" and cfg.family == "nemotron_h":
        name = cfg.top.get("mamba_ssm_cache_dtype") or "float32"  # vLLM PR #39032
    elif name == "auto" and cfg.family == "qwen3_5":
        name = cfg.get("mamba_ssm_dtype") or "auto"
    if name == "auto":
        return cfg.dtype_bytes()
    if name not in STATE_DTYPE_BYTES:
        raise cfg.fail("mamba_ssm_cache_dtype", f"unknown dtype {name!r}")
    return STATE_DTYPE_BYTES[name]


def _figures(cfg, layers, counts, kv_per_token, state, params) -> ModelFigures:
    mla = any("mla" in layer.mixers for layer in layers)
    ffn = ffn_figures(cfg, layers)
    window = cfg.get("sliding_window") if counts["sliding_window"] else None
    return ModelFigures(
        architecture=cfg.architecture,
        num_layers=len(layers),
        hidden_size=cfg.need("hidden_size"),
        vocab_size=params.vocab_size,
        num_attention_heads=cfg.need("num_attention_heads"),
        num_kv_heads=1 if mla else kv_heads(cfg),
        head_dim=(cfg.need("qk_nope_head_dim") + cfg.need("qk_rope_head_dim"))
        if mla
        else head_dim(cfg),
        v_head_dim=cfg.need("v_head_dim") if mla else head_dim(cfg),
        num_full_attention_layers=counts["full_attention"],
        num_sliding_window_layers=counts["sliding_window"],
        sliding_window=window,
        kv_bytes_per_token_per_layer=kv_per_token,
        num_state_layers=counts["mamba"],
        state_bytes_per_layer=state,
        **ffn,
        total_params=params.total,
        active_params=params.active,
        weight_bytes_per_param=params.weights_bytes / params.total,
        kv_bytes_per_element=cfg.dtype_bytes(),
        mtp_params=params.mtp,
        vision_params=params.vision,
        routed_expert_params=params.routed_experts,
        expert_bytes_per_param=(
            params.expert_bytes / params.routed_experts if params.routed_experts else None
        ),
    )
