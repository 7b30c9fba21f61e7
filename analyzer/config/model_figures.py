"""What the step-time model needs to know of a model: its compute and memory figures, derived
from its Hugging Face `config.json` (`analyzer.config.hf_config`) or a preset.

All counts are for the whole model (tensor parallelism divides them at the step model);
bytes are per element of the checkpoint's dtype (`weight_bytes_per_param`) and of the KV cache
(`kv_bytes_per_element`). A layer belongs to exactly one mixer kind: full attention, sliding
window attention, or a recurrent mixer (Mamba / GDN / linear attention, "state" layers).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ModelFigures:
    """A model's compute and memory figures (the step model's input)."""

    architecture: str  # the config's `architectures[0]` (or model_type)
    num_layers: int
    hidden_size: int
    vocab_size: int
    # attention layers (full and sliding window alike)
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int  # query/key head dim (MLA: qk_nope + qk_rope)
    v_head_dim: int  # value head dim (= head_dim but for MLA)
    num_full_attention_layers: int
    num_sliding_window_layers: int
    sliding_window: int | None  # tokens, for the sliding-window layers
    kv_bytes_per_token_per_layer: int  # one attention layer's KV (MLA: the latent + rope)
    # recurrent layers (Mamba, GDN, linear attention)
    num_state_layers: int
    state_bytes_per_layer: int  # one layer's recurrent state (conv + SSM), per request
    # feed-forward
    intermediate_size: int  # dense MLP (0 when every layer is MoE)
    num_dense_mlp_layers: int
    num_moe_layers: int
    num_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    num_shared_experts: int
    shared_expert_intermediate_size: int
    # totals
    total_params: int
    active_params: int  # per token: shared weights + experts_per_token experts
    weight_bytes_per_param: float  # 2 for BF16, 1 for FP8, ~0.53 for MXFP4 ...
    kv_bytes_per_element: int
    # of total_params, what vLLM does not run per token: the multi-token-prediction layers
    # (loaded only for speculative decoding) and the vision encoder
    mtp_params: int = 0
    vision_params: int = 0
    # of total_params, the routed experts of every MoE layer (0: none, or not known, when the
    # step model takes 3 x hidden x moe_intermediate_size an expert and layer, SwiGLU's), and
    # their bytes per parameter (gpt-oss: MXFP4 experts, BF16 the rest; None: the model's
    # weight_bytes_per_param)
    routed_expert_params: int = 0
    expert_bytes_per_param: float | None = None

    def __post_init__(self) -> None:
        if self.expert_bytes_per_param is None:
            object.__setattr__(self, "expert_bytes_per_param", self.weight_bytes_per_param)

    @property
    def weights_bytes(self) -> int:
        return int(self.total_params * self.weight_bytes_per_param)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "weights_bytes": self.weights_bytes}

    @classmethod
    def from_dict(cls, figures: dict[str, Any]) -> ModelFigures:
        """The figures of `as_dict` (a model's `figures` entry); `weights_bytes` is derived."""
        return cls(**{k: v for k, v in figures.items() if k != "weights_bytes"})
