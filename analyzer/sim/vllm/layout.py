"""The cache layout a vLLM 0.33 replay runs with, derived once from a Policy.

vLLM resolves several sizes from its config before the first request; this module does the same
so the managers and the scheduler read plain fields. All sizes are in tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.config.policy import GROUPS, Policy
from analyzer.errors import ConfigError
from analyzer.sim.vllm.host_tier import HostTierSpec, host_tier_spec

FULL, SWA, MAMBA = GROUPS


# The policy keys `make_layout` reads: what they mean to a cache, the layout carries.
LAYOUT_KEYS = frozenset(
    {
        "engine",
        "groups",
        "block_size",
        "prefix_match_unit",
        "retention_interval",
        "sliding_window",
        "max_num_batched_tokens",
        "num_blocks",
        "spec_decode",
        # the host tier (host_tier.host_tier_spec): its slots need the model's bytes per
        # block over the workers
        "host_tier_gib",
        "host_tier_chunks",
        "host_tier_policy",
        "offload_prompt_only",
        "host_bandwidth_gbps",
        "model",
        "tensor_parallel",
    }
)
# The policy keys one cache's serial replay never reads, each for its reason: the fleet
# (`replicas`, `routing`, `cache_scope`: the caller partitions requests into caches); the
# schedule
# and the concurrent clock and step time (the entry point gives a concurrent policy to
# `ConcurrentReplay`, which reads them itself). Any other key set away from its default
# keeps every shortcut off (`gates.unmodelled_keys`).
OUTSIDE_CACHE_KEYS = frozenset(
    {
        "replicas",
        "routing",
        "cache_scope",
        "schedule",
        "max_num_seqs",
        "step_base_ms",
        "step_token_us",
        "time_scale",
        "async_scheduling",
        "step_model",
        "gpu",
        "step_efficiency",
    }
)


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative ints."""
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class CacheLayout:
    """Everything the replay needs to know about the engine, resolved like vLLM 0.33 does.

    - `block_size` (B): tokens per block of every group (align mode forces Mamba = attention).
    - `hash_block_size` (HBS): the prefix match unit; divides B.
    - `fine`: sub-block ("partial") hits are on: a Mamba group with B > HBS and no sliding-window
      group (vLLM's sliding-window manager cannot look up below its block size).
    - `alignment`: every reconciled hit is a multiple of it: HBS when `fine`, else B.
    - `group_types`: one entry per vLLM KV-cache group, in vLLM's group order (full attention,
      sliding window, Mamba); the group id is the index. Copies of a type are looked up jointly.
    - `hash_lookahead` (L): tokens after a block that its hash also covers (EAGLE lookahead).
    - `eagle_drop`: legacy EAGLE: the full-attention groups match one more block and drop it.
    - `alloc_lookahead`: slots attention groups reserve past the scheduled tokens (drafts).
    - `mamba_spec_blocks`: extra Mamba state blocks per request for speculative decoding.
    - `num_blocks`: pool size as vLLM's num_gpu_blocks (block 0 is the null block), or None.
    - `hybrid`: more than one KV-cache group (vLLM's hybrid coordinator, even when all groups
      are full attention; a single group gets the unitary one, which differs for EAGLE).
    - `host_tier`: the host KV tier (vLLM's OffloadingConnector, `host_tier.py`), or None.
    """

    block_size: int
    hash_block_size: int
    fine: bool
    alignment: int
    group_types: tuple[str, ...]
    sliding_window: int | None
    retention_interval: int | None
    max_num_batched_tokens: int | None
    num_blocks: int | None
    hash_lookahead: int
    eagle_drop: bool
    alloc_lookahead: int
    mamba_spec_blocks: int
    hybrid: bool
    host_tier: HostTierSpec | None = None

    @property
    def has_mamba(self) -> bool:
        return MAMBA in self.group_types

    @property
    def speculative(self) -> bool:
        return self.alloc_lookahead > 0

    @property
    def swa_blocks_for_hit(self) -> int:
        """Contiguous resident blocks a sliding-window hit needs: cdiv(W - 1, B)."""
        return cdiv(self.sliding_window - 1, self.block_size)


def make_layout(policy: Policy, num_groups: dict[str, int] | None = None) -> CacheLayout:
    """Resolve `policy` (and optional group counts per type) into a CacheLayout."""
    if policy.engine != "vllm":
        raise ConfigError(f"the vLLM replay cannot run engine {policy.engine!r}")
    counts = _group_counts(policy, num_groups)
    hybrid = sum(counts.values()) > 1
    if policy.num_blocks is None:
        # Copies of a type behave identically without eviction: only capacity tells them apart.
        counts = dict.fromkeys(counts, 1)
    types = tuple(t for t in GROUPS if t in counts for _ in range(counts[t]))
    bs = policy.block_size
    hbs = policy.hash_block_tokens
    if bs % hbs:
        raise ConfigError(f"prefix_match_unit {hbs} must divide block_size {bs}")
    fine = MAMBA in types and hbs < bs and SWA not in types
    spec = policy.spec_decode
    if policy.num_blocks is not None and policy.num_blocks < 2:
        raise ConfigError(
            "policy key 'num_blocks': vLLM needs at least 2 (block 0 is the null block)"
        )
    return CacheLayout(
        block_size=bs,
        hash_block_size=hbs,
        fine=fine,
        alignment=hbs if fine else bs,
        group_types=types,
        sliding_window=policy.sliding_window if SWA in types else None,
        retention_interval=policy.retention_interval,
        max_num_batched_tokens=policy.max_num_batched_tokens,
        num_blocks=policy.num_blocks,
        hash_lookahead=1 if spec == "eagle_lookahead" else 0,
        eagle_drop=spec == "eagle_drop",
        alloc_lookahead=0 if spec == "none" else 1,
        mamba_spec_blocks=0 if spec == "none" else 1,
        hybrid=hybrid,
        host_tier=host_tier_spec(policy),
    )


def decode_events(layout: CacheLayout) -> tuple[int, ...]:
    """Positions mod B where a decode step can change anything (computed tokens before it).

    Without a drafter, exactly: allocation (0), a block becoming full and hashed (B - 1),
    releasing the previous Mamba state (1), the window dropping a block (W - 1). A drafter
    adds its lookahead slots (-1), the lookahead hash (L - 1) and the re-cache after
    sampling (L - 2); those are taken with their successors, to be safe.
    """
    B = layout.block_size
    exact = {0, B - 1}
    if layout.has_mamba:
        exact.add(1)
    if layout.sliding_window is not None:
        exact.add((layout.sliding_window - 1) % B)
    if not layout.speculative:
        return tuple(sorted(exact))
    look = layout.hash_lookahead
    base = {*exact, -layout.alloc_lookahead, look - 1, look - 2}
    return tuple(sorted({(r + d) % B for r in base for d in (0, 1)}))


def _group_counts(policy: Policy, num_groups: dict[str, int] | None) -> dict[str, int]:
    counts = dict.fromkeys(policy.groups, 1)
    for name, count in (num_groups or {}).items():
        if name not in counts:
            raise ConfigError(
                f"num_groups: {name!r} is not one of the policy's groups "
                f"({', '.join(policy.groups)})"
            )
        if type(count) is not int or count < 1:
            raise ConfigError(f"num_groups[{name!r}]: expected an integer >= 1, got {count!r}")
        counts[name] = count
    return counts
