"""Engine options: policy keys that only one engine reads (docs/definitions.md#other-designs).

Each key is named after its engine (`sglang_strategy`, `trtllm_interval`, ...), but for the
vLLM host KV tier's (`UNPREFIXED`: `host_tier_gib`, ...; issue 51 names them so, and vLLM has
no other option), and set like any other policy key (`--set sglang_strategy=extra_buffer`).
A key of another engine than the policy's is an error rather than silently ignored; a key
left out takes its default here.
The resolved options of the policy's engine are stored in `Policy.options`, so they are part
of the run's identity (its canonical JSON).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analyzer.config.host_tier import DEFAULT_INTERCONNECT, INTERCONNECTS
from analyzer.errors import ConfigError


@dataclass(frozen=True)
class Option:
    """One engine option. `kind`: int, number, number_or_auto (a number or the string "auto"),
    number_or_name (a number or one of `choices`), bool or choice; `nullable`: null allowed."""

    engine: str
    kind: str
    default: Any
    doc: str
    minimum: float = 0
    choices: tuple[str, ...] = ()
    nullable: bool = False
    # Every count and size an engine reads fits an int32; a number is finite and as small.
    maximum: float = (1 << 31) - 1

    def check(self, key: str, value: Any) -> Any:
        if value is None and self.nullable:
            return None
        if self.kind == "choice":
            if value not in self.choices:
                raise ConfigError(
                    f"policy key {key!r}: {value!r} is not one of {', '.join(self.choices)}"
                )
            return value
        if self.kind == "bool":
            if type(value) is not bool:
                raise ConfigError(f"policy key {key!r}: expected true or false, got {value!r}")
            return value
        if self.kind == "number_or_auto" and value == "auto":
            return value
        if self.kind == "number_or_name" and isinstance(value, str):
            if value not in self.choices:
                raise ConfigError(
                    f"policy key {key!r}: unknown name {value!r}; known: "
                    f"{', '.join(self.choices)} (or a number)"
                )
            return value
        numeric = (int,) if self.kind == "int" else (int, float)
        # `not (a <= v <= b)` also refuses nan
        if type(value) not in numeric or not (self.minimum <= value <= self.maximum):
            what = "an integer" if self.kind == "int" else "a number"
            null = " or null" if self.nullable else ""
            auto = " or 'auto'" if self.kind == "number_or_auto" else ""
            if self.kind == "number_or_name":
                auto = f" or one of {', '.join(self.choices)}"
            raise ConfigError(
                f"policy key {key!r}: expected {what} >= {self.minimum:g} and <= "
                f"{self.maximum:,.0f}{null}{auto}, got {value!r}"
            )
        return value


OPTIONS: dict[str, Option] = {
    # vLLM 0.33's host KV tier: the OffloadingConnector with its CPU backend
    # (../shared/reference/kv-offload.md; analyzer/sim/vllm/host_tier.py).
    "host_tier_gib": Option(
        "vllm",
        "number",
        0,
        "Host (CPU) KV tier in GiB over all workers (--kv-offloading-size); 0 = none. Its "
        "slots follow from the model preset's bytes per block (analyzer/config/host_tier.py).",
    ),
    "host_tier_chunks": Option(
        "vllm",
        "int",
        None,
        "The host tier's slot count itself (vLLM's num_chunks, one GPU block each), for a "
        "policy without a model preset's bytes per block; null = from host_tier_gib.",
        minimum=1,
        nullable=True,
    ),
    "host_tier_policy": Option(
        "vllm",
        "choice",
        "lru",
        "The host tier's eviction (eviction_policy): lru (request-scoped recency) or arc.",
        choices=("lru", "arc"),
    ),
    "offload_prompt_only": Option(
        "vllm",
        "bool",
        True,
        "Store prompt chunks only, never decode tokens (vLLM's default).",
    ),
    "host_bandwidth_gbps": Option(
        "vllm",
        "number_or_name",
        DEFAULT_INTERCONNECT,
        "A host-tier load's one-way bandwidth in GB/s, or an interconnect: "
        + ", ".join(f"{r.name} {r.h2d_gbps:g}" for r in INTERCONNECTS.values())
        + ".",
        minimum=0.001,
        choices=tuple(INTERCONNECTS),
    ),
    # SGLang MambaRadixCache / SWARadixCache (reference/hybrid-policies.md section 1).
    "sglang_strategy": Option(
        "sglang",
        "choice",
        "no_buffer",
        "Mamba state placement: no_buffer (chunk ends and sequence ends) or extra_buffer "
        "(last chunk-aligned point per extend, branch point, decode track interval).",
        choices=("no_buffer", "extra_buffer"),
    ),
    "sglang_chunk_tokens": Option(
        "sglang",
        "int",
        64,
        "Recurrent kernel chunk C (mamba_cache_chunk_size); extra_buffer tracks states on "
        "multiples of max(C, block_size).",
        minimum=1,
    ),
    "sglang_track_interval": Option(
        "sglang",
        "int",
        256,
        "extra_buffer: decode tracks a state every this many tokens (--mamba-track-interval).",
        minimum=1,
    ),
    "sglang_num_states": Option(
        "sglang",
        "int",
        None,
        "Mamba state pool in states (--max-mamba-cache-size); null = unbounded.",
        minimum=1,
        nullable=True,
    ),
    "sglang_swa_full_tokens_ratio": Option(
        "sglang",
        "number",
        0.8,
        "SWARadixCache: sliding-window KV pool as a fraction of the full KV pool "
        "(--swa-full-tokens-ratio); unbounded when num_blocks is null.",
    ),
    # Marconi (MLSys 2025): states at branch points and sequence ends, FLOP-aware eviction.
    "marconi_alpha": Option(
        "marconi",
        "number_or_auto",
        1.0,
        "Weight of FLOP efficiency against recency in the eviction score, or auto: 0 until "
        "the first eviction, then the value of 0, 0.1, ..., 2.0 that saves the most FLOPs "
        "over a bootstrap window replayed from a snapshot (Marconi's artifact).",
    ),
    "marconi_bootstrap": Option(
        "marconi",
        "int",
        5,
        "marconi_alpha auto: the bootstrap window in multiples of the requests replayed up "
        "to the first eviction (Marconi's artifact: 5).",
        minimum=1,
    ),
    # TensorRT-LLM hybrid reuse: a state snapshot every interval tokens.
    "trtllm_interval": Option(
        "trtllm",
        "int",
        None,
        "Snapshot interval in tokens (periodic_snapshot_interval, alias "
        "mamba_state_cache_interval); a multiple of block_size; null = no periodic snapshots "
        "(TensorRT-LLM's default).",
        minimum=1,
        nullable=True,
    ),
    "trtllm_save_last": Option(
        "trtllm",
        "bool",
        False,
        "Also snapshot at the last full block of the prompt (mamba_save_last_snapshot).",
    ),
    # llama.cpp server context checkpoints.
    "llamacpp_max_checkpoints": Option(
        "llamacpp",
        "int",
        32,
        "Checkpoints kept per slot (--ctx-checkpoints); the oldest goes first.",
        minimum=1,
    ),
    "llamacpp_min_step": Option(
        "llamacpp",
        "int",
        256,
        "Minimum tokens between checkpoints (--checkpoint-min-step; 256 in recent builds, "
        "8192 in older ones; 0 = no minimum).",
    ),
    "llamacpp_slots": Option(
        "llamacpp",
        "int",
        1,
        "Slots per replica (-np, --parallel). A request takes the slot whose memory shares "
        "the longest prefix with it above --slot-prompt-similarity 0.10, else the least "
        "recently used one.",
        minimum=1,
    ),
    "llamacpp_n_batch": Option(
        "llamacpp", "int", 2048, "Logical batch size (-b, --batch-size).", minimum=1
    ),
    "llamacpp_n_ubatch": Option(
        "llamacpp", "int", 512, "Physical batch size (-ub, --ubatch-size).", minimum=1
    ),
    "llamacpp_cache_tokens": Option(
        "llamacpp",
        "int",
        0,
        "Host prompt cache (--cache-ram) capacity in cached tokens; 0 = off (--cache-ram 0), "
        "null = unbounded. llama-server counts MiB (default 8192): divide by bytes per token.",
        nullable=True,
    ),
    # SuffixReplay / Tail-Replay: no state checkpoints; replay a recent suffix.
    "suffix_replay_tokens": Option(
        "suffix_replay",
        "int",
        512,
        "Replay budget R: the last R matched tokens are recomputed through the recurrent "
        "layers (reported as replay_tokens, not hits).",
    ),
}


# Options a policy leaves out of `Policy.options` at their defaults (`Policy.option` gives
# the default): added after runs of their engine were stored, whose identities (canonical
# JSON) and equality with a default Policy must not change.
QUIET_AT_DEFAULT = frozenset(
    {"host_tier_gib", "host_tier_chunks", "host_tier_policy", "offload_prompt_only",
     "host_bandwidth_gbps"}
)  # fmt: skip


# Options not named after their engine: the vLLM host tier's.
UNPREFIXED = QUIET_AT_DEFAULT


def resolve(engine: str, values: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The engine's options (sorted by key), defaults filled in; others' keys are errors."""
    for key in sorted(values):
        owner = OPTIONS[key].engine
        if owner != engine:
            raise ConfigError(f"policy key {key!r} applies to engine {owner}, not {engine}")
    resolved = (
        (key, OPTIONS[key].check(key, values.get(key, opt.default)))
        for key, opt in sorted(OPTIONS.items())
        if opt.engine == engine
    )
    return tuple(
        (key, value)
        for key, value in resolved
        if key not in QUIET_AT_DEFAULT or value != OPTIONS[key].default
    )
