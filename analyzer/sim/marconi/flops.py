"""Marconi's cost model: FLOPs a cached prefix saves and bytes it occupies (fp16 formulas of
the Marconi artifact, reference/hybrid-policies.md sections 0 and 2).

Per layer, for L tokens: attention 8·L·d² + 4·L²·d, MLP 16·L·d², Mamba 12·L·d² + 16·L·d·N
+ 10·L·d. Bytes: KV per token per attention layer, one recurrent state per Mamba layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzer.config.models import load_model
from analyzer.config.policy import Policy

# Marconi's default model ("NVIDIA 7B hybrid"): 4 attention + 24 SSM + 28 MLP layers.
D_MODEL = 4096
D_STATE = 128
EXPAND = 2
CONV_KERNEL = 4


@dataclass(frozen=True)
class CostModel:
    """Layer mix, widths and bytes: `kv_bytes` per token per attention layer, `state_bytes`
    per Mamba layer (one snapshot)."""

    attn_layers: int = 4
    ssm_layers: int = 24
    mlp_layers: int = 28
    d_model: int = D_MODEL
    d_state: int = D_STATE
    kv_bytes: int = 2 * D_MODEL * 2
    state_bytes: int = D_MODEL * D_STATE * 2 + (EXPAND * D_MODEL + 2 * D_STATE) * CONV_KERNEL * 2

    def attention_flops(self, tokens: float) -> float:
        d = self.d_model
        return 8 * tokens * d * d + 4 * tokens * tokens * d

    def flops_saved(self, path_tokens: int, edge_tokens: int) -> float:
        """FLOPs a hit at the end of a node saves over a hit at its parent (Marconi's
        saved(v); the MLP term uses the MLP formula, not the artifact's attention quirk)."""
        d, n = self.d_model, self.d_state
        parent = path_tokens - edge_tokens
        mamba = 12 * edge_tokens * d * d + 16 * edge_tokens * d * n + 10 * edge_tokens * d
        attn = self.attention_flops(path_tokens) - self.attention_flops(parent)
        mlp = 16 * edge_tokens * d * d
        return self.ssm_layers * mamba + self.attn_layers * attn + self.mlp_layers * mlp

    def memory_bytes(self, path_tokens: int) -> float:
        """Marconi's mem(v): the node's states plus the KV of its whole root path."""
        return self.ssm_layers * self.state_bytes + self.attn_layers * self.kv_bytes * path_tokens


PRESET_KEYS = (
    "num_full_attention_layers",
    "num_mamba_layers",
    "kv_bytes_per_token_per_layer",
    "mamba_state_bytes_per_layer",
)


def preset_costs(policy: Policy) -> CostModel | None:
    """The cost model of the policy's model preset, None without a preset or its bytes.

    A preset gives the attention / Mamba layer counts and bytes; it has no widths, so d and N
    stay Marconi's (4096, 128) and every layer is taken to have an MLP (attention + Mamba).
    """
    if policy.model is None:
        return None
    model = load_model(policy.model)
    if any(model.get(k) is None for k in PRESET_KEYS):
        return None
    attn, ssm, kv, state = (model[k] for k in PRESET_KEYS)
    return CostModel(
        attn_layers=attn, ssm_layers=ssm, mlp_layers=attn + ssm, kv_bytes=kv, state_bytes=state
    )


def cost_model(policy: Policy) -> tuple[CostModel, int]:
    """(the cost model, pool blocks charged per state).

    With a preset that has bytes: its costs, and a state costs its bytes over one block's KV
    bytes (attention layers x block_size x KV bytes per token per layer), rounded up. Else
    Marconi's 7B costs and 1 block per state (like vLLM align mode / TRT-LLM).
    """
    costs = preset_costs(policy)
    if costs is None:
        return CostModel(), 1
    block_bytes = costs.attn_layers * costs.kv_bytes * policy.block_size
    return costs, max(1, math.ceil(costs.ssm_layers * costs.state_bytes / block_bytes))
