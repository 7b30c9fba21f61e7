"""Parameters and weight bytes of a model from its Hugging Face config: the checkpoint's
tensors counted layer by layer as vLLM 0.33's model holds them (embeddings, attention or MLA
projections, MLPs, routed and shared experts with their router, Mamba / GDN projections,
norms; tied embeddings once), the multi-token-prediction layers and the vision encoder
counted apart, then bytes from the dtype and `quantization_config` (gpt-oss's MXFP4 experts:
4 bits + one 8-bit scale per 32 values; FP8 linear layers with float32 block scales).

`active` is what one token's forward multiplies by: the language model less its input
embedding table (a lookup) and less the routed experts it does not pick; MTP layers and the
vision encoder are not in it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from analyzer.config.hf_layers import ffn_spec, gdn_dims, mamba2_dims
from analyzer.config.hf_read import HfConfig, Layer, head_dim, kv_heads

LINEAR = ("attention", "dense_mlp", "expert", "shared_expert", "mixer")
MXFP4_BYTES = 17 / 32  # 32 four-bit values share one 8-bit scale (OCP MX)
QWEN_QK_NORM = ("qwen3_next", "qwen3_5", "gemma3")
NORMS_PER_LAYER = {"gemma3": 4, "nemotron_h": 1}


@dataclass(frozen=True)
class Params:
    total: int  # every tensor of the checkpoint: language model + MTP + vision
    active: int  # per token (module docstring)
    mtp: int
    vision: int
    weights_bytes: int
    vocab_size: int
    routed_experts: int = 0  # of `total`: the routed experts of every MoE layer (biases too)
    expert_bytes: float = 0.0  # their bytes


def attention_params(cfg: HfConfig) -> int:
    h, heads, kv, hd = (
        cfg.need("hidden_size"),
        cfg.need("num_attention_heads"),
        kv_heads(cfg),
        head_dim(cfg),
    )
    gate = 2 if cfg.family == "qwen3_next" or cfg.get("attn_output_gate", False) else 1
    params = h * heads * hd * gate + 2 * h * kv * hd + heads * hd * h
    if cfg.get("attention_bias", False):
        params += heads * hd * gate + 2 * kv * hd
    if cfg.family == "gpt_oss":
        params += h + heads  # o_proj bias, attention sinks
    if cfg.family in QWEN_QK_NORM or cfg.architecture.startswith("Qwen3"):
        params += 2 * hd
    return params


def mla_params(cfg: HfConfig) -> int:
    h, heads = cfg.need("hidden_size"), cfg.need("num_attention_heads")
    q_rank, kv_rank = cfg.need("q_lora_rank"), cfg.need("kv_lora_rank")
    nope, rope, v = (
        cfg.need("qk_nope_head_dim"),
        cfg.need("qk_rope_head_dim"),
        cfg.need("v_head_dim"),
    )
    q = h * q_rank + q_rank + q_rank * heads * (nope + rope)
    kv = h * (kv_rank + rope) + kv_rank + kv_rank * heads * (nope + v)
    return q + kv + heads * v * h


def mixer_params(cfg: HfConfig, kind: str) -> int:
    """One Mamba2 / Mamba1 / GDN mixer's tensors (projections, conv, A, D, dt, gated norm)."""
    h = cfg.need("hidden_size")
    if kind == "mamba2":
        d = mamba2_dims(cfg)
        conv = d["d_inner"] + 2 * d["groups"] * d["d_state"]
        in_proj = h * (d["d_inner"] + conv + d["heads"])
        return in_proj + conv * (d["kernel"] + 1) + 3 * d["heads"] + d["d_inner"] * (1 + h)
    if kind == "mamba1":
        d_inner, d_state = cfg.need("mamba_expand") * h, cfg.need("mamba_d_state")
        rank = cfg.get("mamba_dt_rank") or -(-h // 16)
        conv = d_inner * (cfg.need("mamba_d_conv") + 1)
        x_proj, dt_proj = d_inner * (rank + 2 * d_state), rank * d_inner + d_inner
        norms = rank + 2 * d_state if cfg.family == "jamba" else 0
        return h * 2 * d_inner + conv + x_proj + dt_proj + d_inner * (d_state + 1 + h) + norms
    g = gdn_dims(cfg)
    key, value = g["key_heads"] * g["key_dim"], g["value_heads"] * g["value_dim"]
    in_proj = h * (2 * key + 2 * value + 2 * g["value_heads"])
    return (
        in_proj
        + (2 * key + value) * g["kernel"]
        + 2 * g["value_heads"]
        + g["value_dim"]
        + value * h
    )


def ffn_params(cfg: HfConfig, ffn: str) -> Counter:
    """One layer's feed-forward by category; 'expert' is all routed experts together."""
    spec, h = ffn_spec(cfg), cfg.need("hidden_size")
    mats = 3 if spec["gated"] else 2
    out: Counter = Counter()
    if ffn == "dense":
        out["dense_mlp"] = mats * h * spec["dense"]
    elif ffn == "moe":
        out["expert"] = spec["experts"] * mats * h * spec["expert"]
        out["router"] = h * spec["experts"]
        if cfg.family == "gpt_oss":
            out["expert_bias"] = spec["experts"] * (2 * spec["expert"] + h)
            out["router"] += spec["experts"]
        if cfg.family in ("deepseek_v3", "nemotron_h"):
            out["router"] += spec["experts"]  # e_score_correction_bias
        out["shared_expert"] = spec["shared"] * mats * h * spec["shared_size"]
        if cfg.family in ("qwen3_next", "qwen3_5"):
            out["router"] += h  # shared_expert_gate
    return out


def layer_params(cfg: HfConfig, layer: Layer) -> Counter:
    out = ffn_params(cfg, layer.ffn)
    for mixer in layer.mixers:
        if mixer in ("full", "sliding"):
            out["attention"] += attention_params(cfg)
        elif mixer == "mla":
            out["attention"] += mla_params(cfg)
        else:
            out["mixer"] += mixer_params(cfg, mixer)
    out["norm"] += NORMS_PER_LAYER.get(cfg.family, 2) * cfg.need("hidden_size")
    return out


def active_fraction(cfg: HfConfig, category: str) -> float:
    if category not in ("expert", "expert_bias"):
        return 1.0
    spec = ffn_spec(cfg)
    return spec["per_token"] / spec["experts"] if spec["experts"] else 0.0


def _tied(cfg: HfConfig) -> bool:
    for where in (cfg.text, cfg.top):
        if isinstance(where.get("tie_word_embeddings"), bool):
            return where["tie_word_embeddings"]
    return cfg.family != "nemotron_h"  # transformers' default; NemotronH's config says False


def vocab_size(cfg: HfConfig) -> int:
    if cfg.family == "gemma3" and cfg.get("vocab_size") is None:
        return 262_208  # Gemma3TextConfig's default
    return cfg.need("vocab_size")


def mtp_params(cfg: HfConfig, layers: list[Layer]) -> Counter:
    """The multi-token-prediction layers the checkpoint holds (vLLM loads them only for
    speculative decoding): Qwen's fc + norms + one decoder layer each; DeepSeek's also
    carry their own embedding and head."""
    h = cfg.need("hidden_size")
    count = cfg.get("mtp_num_hidden_layers") or cfg.get("num_nextn_predict_layers")
    if count is None and cfg.family == "qwen3_next":
        count = 1  # Qwen3NextMTP's default (its config has no field for it)
    if not count or cfg.family not in ("qwen3_next", "qwen3_5", "deepseek_v3"):
        return Counter()
    ffn = "moe" if any(layer.ffn == "moe" for layer in layers) else "dense"
    mixer = "mla" if cfg.family == "deepseek_v3" else "full"
    one = layer_params(cfg, _mtp_layer(mixer, ffn))
    one["dense_mlp"] += 2 * h * h  # fc / eh_proj
    one["norm"] += 3 * h
    if cfg.family == "deepseek_v3":
        one["embedding"] += 2 * vocab_size(cfg) * h
    return Counter({k: v * count for k, v in one.items()})


def _mtp_layer(mixer: str, ffn: str) -> Layer:
    return Layer((mixer,), ffn)


def vision_params(cfg: HfConfig) -> int:
    """The vision encoder vLLM loads for a *ForConditionalGeneration (Qwen3.5's ViT and
    merger, Gemma 3's SigLIP and projector); 0 without a vision_config."""
    v = cfg.top.get("vision_config")
    if not isinstance(v, dict):
        return 0
    h, inter = v.get("hidden_size", 0), v.get("intermediate_size", 0)
    block = 4 * h * h + 4 * h + 2 * h * inter + inter + h + 4 * h  # attention, MLP, 2 norms
    if cfg.family == "qwen3_5":
        patch = v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2 * h + h
        merged = h * v["spatial_merge_size"] ** 2
        merger = (
            2 * h + merged * merged + merged + merged * v["out_hidden_size"] + v["out_hidden_size"]
        )
        mergers = 1 + len(v.get("deepstack_visual_indexes") or [])
        return patch + v["num_position_embeddings"] * h + v["depth"] * block + mergers * merger
    if cfg.family == "gemma3":
        patch = v.get("num_channels", 3) * v["patch_size"] ** 2 * h + h
        positions = (v["image_size"] // v["patch_size"]) ** 2 * h
        projector = h * cfg.need("hidden_size") + h
        return patch + positions + v["num_hidden_layers"] * block + 2 * h + projector
    return 0


def count_params(cfg: HfConfig, layers: list[Layer]) -> Params:
    h, vocab = cfg.need("hidden_size"), vocab_size(cfg)
    lm: Counter = Counter({"embedding": vocab * h, "norm": h})
    if not _tied(cfg):
        lm["lm_head"] = vocab * h
    for layer in layers:
        lm.update(layer_params(cfg, layer))
    active_lm = sum(
        int(n * active_fraction(cfg, cat)) for cat, n in lm.items() if cat != "embedding"
    )
    if _tied(cfg):
        active_lm += vocab * h  # the tied embedding is also the LM head's matmul
    mtp, vision = mtp_params(cfg, layers), vision_params(cfg)
    per_param = _bytes_per_param(cfg)
    weights = sum(n * per_param(cat) for cat, n in (lm + mtp).items())
    weights += vision * cfg.dtype_bytes()
    mtp_total = sum(mtp.values())
    total = sum(lm.values()) + mtp_total + vision
    routed = ("expert", "expert_bias")
    experts = sum(lm[cat] for cat in routed)
    expert_bytes = sum(lm[cat] * per_param(cat) for cat in routed)
    return Params(total, active_lm, mtp_total, vision, int(weights), vocab, experts, expert_bytes)


def _bytes_per_param(cfg: HfConfig):
    """category -> bytes per parameter, from `quantization_config` (absent: the dtype)."""
    quant = cfg.top.get("quantization_config") or cfg.text.get("quantization_config")
    dtype = cfg.dtype_bytes()
    if not quant:
        return lambda category: dtype
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    if method == "mxfp4":
        return lambda category: MXFP4_BYTES if category == "expert" else dtype
    if method == "fp8":
        block = quant.get("weight_block_size")
        scale = 4 / (block[0] * block[1]) if block else 0.0
        return lambda category: 1 + scale if category in LINEAR else dtype
    raise cfg.fail(
        "quantization_config.quant_method",
        f"{method!r} is not a quantization hpa knows (mxfp4, fp8)",
    )
