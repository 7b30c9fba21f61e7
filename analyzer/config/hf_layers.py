"""The layers of a Hugging Face config, per architecture family (`hf_read.ARCHITECTURES`):
each layer's mixers and feed-forward as vLLM 0.33's model builds them, the recurrent state's
element counts, and the feed-forward figures of `ModelFigures`."""

from __future__ import annotations

from typing import Any

from analyzer.config.hf_read import HfConfig, Layer

# Layer-type spellings of `layer_types` -> hpa's mixer names.
LAYER_TYPES = {
    "full_attention": "full",
    "attention": "full",
    "sliding_attention": "sliding",
    "linear_attention": "gdn",
    "mamba": "mamba2",
}


def plan(cfg: HfConfig) -> list[Layer]:
    return _PLANS[cfg.family](cfg)


def _layer(mixers: tuple[str, ...], ffn: str) -> Layer:
    return Layer(mixers, ffn)


def _layer_types(cfg: HfConfig, count: int, default) -> list[str]:
    """`layer_types` mapped to mixer names, or `default(i)` for each layer without it."""
    types = cfg.get("layer_types")
    if types is None:
        return [default(i) for i in range(count)]
    if not isinstance(types, list) or len(types) != count:
        raise cfg.fail(cfg.prefix + "layer_types", f"expected a list of {count} layer types")
    unknown = [t for t in types if t not in LAYER_TYPES]
    if unknown:
        raise cfg.fail(cfg.prefix + "layer_types", f"unknown layer type {unknown[0]!r}")
    return [LAYER_TYPES[t] for t in types]


def _sparse_moe(cfg: HfConfig, i: int, experts: int) -> str:
    """Qwen's rule: MoE unless the layer is in mlp_only_layers or off decoder_sparse_step."""
    step = cfg.get("decoder_sparse_step", 1)
    dense = i in cfg.get("mlp_only_layers", []) or experts == 0 or (i + 1) % step != 0
    return "dense" if dense else "moe"


def _experts(cfg: HfConfig) -> int:
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        if cfg.get(key) is not None:
            return cfg.need(key)
    return 0


def _llama(cfg: HfConfig) -> list[Layer]:
    n = cfg.need("num_hidden_layers")
    mixers = _layer_types(cfg, n, lambda i: "full")
    experts = _experts(cfg)
    return [_layer((mixers[i],), _sparse_moe(cfg, i, experts)) for i in range(n)]


def _gpt_oss(cfg: HfConfig) -> list[Layer]:
    n = cfg.need("num_hidden_layers")
    return [_layer((m,), "moe") for m in _layer_types(cfg, n, lambda i: "full")]


def _gemma3(cfg: HfConfig) -> list[Layer]:
    n, every = cfg.need("num_hidden_layers"), cfg.get("sliding_window_pattern", 6)
    mixers = _layer_types(cfg, n, lambda i: "full" if (i + 1) % every == 0 else "sliding")
    return [_layer((m,), "dense") for m in mixers]


def _deepseek_v3(cfg: HfConfig) -> list[Layer]:
    n, first = cfg.need("num_hidden_layers"), cfg.get("first_k_dense_replace", 0)
    freq = cfg.get("moe_layer_freq", 1)
    return [_layer(("mla",), "dense" if i < first or i % freq else "moe") for i in range(n)]


def _qwen_hybrid(cfg: HfConfig) -> list[Layer]:
    n, every = cfg.need("num_hidden_layers"), cfg.get("full_attention_interval", 4)
    mixers = _layer_types(cfg, n, lambda i: "full" if (i + 1) % every == 0 else "gdn")
    experts = _experts(cfg)
    return [_layer((mixers[i],), _sparse_moe(cfg, i, experts)) for i in range(n)]


def _nemotron_h(cfg: HfConfig) -> list[Layer]:
    pattern = cfg.need("hybrid_override_pattern", str)
    kinds = {"M": (("mamba2",), ""), "*": (("full",), ""), "-": ((), "dense"), "E": ((), "moe")}
    bad = [c for c in pattern if c not in kinds]
    if bad:
        raise cfg.fail("hybrid_override_pattern", f"unknown layer {bad[0]!r}")
    return [_layer(*kinds[c]) for c in pattern]


def _granite_hybrid(cfg: HfConfig) -> list[Layer]:
    n = cfg.need("num_hidden_layers")
    ffn = "moe" if _experts(cfg) else "dense"
    return [_layer((m,), ffn) for m in _layer_types(cfg, n, lambda i: "mamba2")]


def _jamba(cfg: HfConfig) -> list[Layer]:
    n = cfg.need("num_hidden_layers")
    period, offset = cfg.need("attn_layer_period"), cfg.need("attn_layer_offset")
    e_period, e_offset = cfg.get("expert_layer_period", 1), cfg.get("expert_layer_offset", 0)
    moe = _experts(cfg) > 1
    return [
        _layer(
            ("full",) if i % period == offset else ("mamba1",),
            "moe" if moe and i % e_period == e_offset else "dense",
        )
        for i in range(n)
    ]


def _falcon_h1(cfg: HfConfig) -> list[Layer]:
    return [_layer(("full", "mamba2"), "dense") for _ in range(cfg.need("num_hidden_layers"))]


_PLANS = {
    "llama": _llama,
    "gpt_oss": _gpt_oss,
    "gemma3": _gemma3,
    "deepseek_v3": _deepseek_v3,
    "qwen3_next": _qwen_hybrid,
    "qwen3_5": _qwen_hybrid,
    "nemotron_h": _nemotron_h,
    "granite_hybrid": _granite_hybrid,
    "jamba": _jamba,
    "falcon_h1": _falcon_h1,
}


def mamba2_dims(cfg: HfConfig) -> dict[str, int]:
    """Mamba2's dims under each family's spelling: d_inner, groups, d_state, heads, head dim,
    conv kernel (`get_mamba_state_shape_from_config` of nemotron_h, granitemoehybrid,
    falcon_h1)."""
    if cfg.family == "nemotron_h":
        heads, hd = cfg.need("mamba_num_heads"), cfg.need("mamba_head_dim")
        return {"d_inner": heads * hd, "groups": cfg.need("n_groups"), "heads": heads,
                "head_dim": hd, "d_state": cfg.need("ssm_state_size"),
                "kernel": cfg.need("conv_kernel")}  # fmt: skip
    heads, hd = cfg.need("mamba_n_heads"), cfg.need("mamba_d_head")
    d_inner = heads * hd
    if cfg.family == "falcon_h1":
        d_inner = cfg.get("mamba_d_ssm") or int(cfg.need("mamba_expand") * cfg.need("hidden_size"))
    return {"d_inner": d_inner, "groups": cfg.need("mamba_n_groups"), "heads": heads,
            "head_dim": hd, "d_state": cfg.need("mamba_d_state"),
            "kernel": cfg.need("mamba_d_conv")}  # fmt: skip


def gdn_dims(cfg: HfConfig) -> dict[str, int]:
    return {
        "key_heads": cfg.need("linear_num_key_heads"),
        "key_dim": cfg.need("linear_key_head_dim"),
        "value_heads": cfg.need("linear_num_value_heads"),
        "value_dim": cfg.need("linear_value_head_dim"),
        "kernel": cfg.need("linear_conv_kernel_dim"),
    }


def state_shapes(cfg: HfConfig, layers: list[Layer]) -> tuple[int, int]:
    """(conv state elements, SSM state elements) of one recurrent layer (TP1, no spec decode)."""
    kinds = {m for layer in layers for m in layer.mixers if m in ("mamba1", "mamba2", "gdn")}
    if kinds == {"mamba2"}:
        d = mamba2_dims(cfg)
        conv = (d["d_inner"] + 2 * d["groups"] * d["d_state"]) * (d["kernel"] - 1)
        return conv, d["heads"] * d["head_dim"] * d["d_state"]
    if kinds == {"mamba1"}:
        d_inner = cfg.need("mamba_expand") * cfg.need("hidden_size")
        return d_inner * (cfg.need("mamba_d_conv") - 1), d_inner * cfg.need("mamba_d_state")
    if kinds == {"gdn"}:
        g = gdn_dims(cfg)
        width = 2 * g["key_heads"] * g["key_dim"] + g["value_heads"] * g["value_dim"]
        ssm = g["value_heads"] * g["value_dim"] * g["key_dim"]
        return width * (g["kernel"] - 1), ssm
    raise cfg.fail("num_hidden_layers", f"recurrent layers of kinds {sorted(kinds)}")


def ffn_spec(cfg: HfConfig) -> dict[str, Any]:
    """The feed-forward's sizes: dense intermediate, experts, per-token experts, expert
    intermediate, shared experts and their intermediate, and whether the MLPs are gated."""
    family, experts = cfg.family, _experts(cfg)
    gated = family != "nemotron_h"  # NemotronH's MLPs and experts are relu2, not SwiGLU
    spec = {"dense": cfg.get("intermediate_size", 0), "experts": experts, "per_token": 0,
            "expert": 0, "shared": 0, "shared_size": 0, "gated": gated}  # fmt: skip
    if experts:
        spec["per_token"] = cfg.first("num_experts_per_tok", "experts_per_token")
        spec["expert"] = cfg.get("moe_intermediate_size") or cfg.need("intermediate_size")
    if family in ("qwen3_next", "qwen3_5") and experts:
        spec["shared"], spec["shared_size"] = 1, cfg.need("shared_expert_intermediate_size")
    elif family in ("deepseek_v3", "nemotron_h") and experts:
        spec["shared"] = cfg.get("n_shared_experts", 0)
        size = cfg.get("moe_shared_expert_intermediate_size") or spec["expert"]
        spec["shared_size"] = size if spec["shared"] else 0
        if family == "nemotron_h":  # one shared expert of the stated size
            spec["shared"] = 1 if spec["shared"] else 0
    elif family == "granite_hybrid":
        spec["dense"] = 0 if experts else cfg.need("shared_intermediate_size")
        spec["shared"] = 1 if experts else 0
        spec["shared_size"] = cfg.need("shared_intermediate_size") if experts else 0
    if family == "gpt_oss":
        spec["dense"] = 0
    return spec


def ffn_figures(cfg: HfConfig, layers: list[Layer]) -> dict[str, int]:
    spec = ffn_spec(cfg)
    return {
        "intermediate_size": spec["dense"],
        "num_dense_mlp_layers": sum(layer.ffn == "dense" for layer in layers),
        "num_moe_layers": sum(layer.ffn == "moe" for layer in layers),
        "num_experts": spec["experts"],
        "experts_per_token": spec["per_token"],
        "moe_intermediate_size": spec["expert"],
        "num_shared_experts": spec["shared"],
        "shared_expert_intermediate_size": spec["shared_size"],
    }
