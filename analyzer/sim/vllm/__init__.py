"""vLLM 0.33.0's hybrid prefix cache (engine `vllm`), replayed serially or, with
`schedule: concurrent`, through its scheduler on a simulated clock."""

from collections.abc import Callable, Iterable, Iterator
from functools import partial

from analyzer.config.policy import Policy
from analyzer.sim.records import ResultColumns, SimRequest, SimResult
from analyzer.sim.vllm.compiled import fast_replay, serial_gate
from analyzer.sim.vllm.compiled.fast import attention_columns
from analyzer.sim.vllm.concurrent import ConcurrentReplay
from analyzer.sim.vllm.gates import SHARED_FORM, unmodelled_keys
from analyzer.sim.vllm.host_concurrent import HostTierConcurrent, check_host_schedule
from analyzer.sim.vllm.host_replay import HostTierReplay
from analyzer.sim.vllm.layout import make_layout
from analyzer.sim.vllm.reference import NOT_SCHEDULABLE, VllmReplay

__all__ = [
    "ConcurrentReplay",
    "VllmReplay",
    "check_policy",
    "concurrent_replay",
    "hit_alignment",
    "replay",
    "replay_from_shared",
    "replay_path",
]


def replay(
    requests: Iterable[SimRequest], policy: Policy, *, num_groups: dict[str, int] | None = None
) -> Iterator[SimResult]:
    """Replay `requests` (arrival order, one cache) under `policy`, serially or concurrently
    as its `schedule` says. `num_groups`: KV-cache groups per type (capacity only)."""
    if policy.schedule == "concurrent":
        return concurrent_replay(policy, num_groups=num_groups).run(requests)
    layout = make_layout(policy, num_groups)
    if layout.host_tier is not None:
        return HostTierReplay(policy, num_groups=num_groups).run(requests)
    fast = None
    if not unmodelled_keys(policy):  # a key no shortcut knows: the reference alone
        fast = fast_replay(layout, NOT_SCHEDULABLE)
    return (fast or VllmReplay(policy, num_groups=num_groups)).run(requests)


def concurrent_replay(
    policy: Policy, *, num_groups: dict[str, int] | None = None
) -> ConcurrentReplay:
    """One replica's concurrent replay for `policy`: with its host KV tier where it has one."""
    if make_layout(policy, num_groups).host_tier is not None:
        return HostTierConcurrent(policy, num_groups=num_groups)
    return ConcurrentReplay(policy, num_groups=num_groups)


def replay_path(policy: Policy, *, num_groups: dict[str, int] | None = None) -> str:
    """Which replay `replay` runs for `policy`: `concurrent`, the serial fast path's gate
    (`closed_form`, `dense`, `hybrid`: `analyzer.sim.vllm.gates`), `host_tier` (the
    reference with a host KV tier, `host_replay.py`) or `reference`."""
    if policy.schedule == "concurrent":
        return "concurrent"
    if unmodelled_keys(policy):
        return "reference"
    layout = make_layout(policy, num_groups)
    if layout.host_tier is not None:
        return "host_tier"
    gate = serial_gate(layout)
    return gate.name if gate is not None else "reference"


def replay_from_shared(
    policy: Policy, *, num_groups: dict[str, int] | None = None
) -> Callable[..., ResultColumns] | None:
    """The serial replay's results (as result columns) computed from each request's shared
    prefix in its cache (`fast.attention_columns`, all requests at once) where `policy`
    allows it: full attention alone, unbounded, no sliding window or speculative decoding,
    match unit = block. None where requests must replay one by one."""
    if policy.schedule == "concurrent" or unmodelled_keys(policy):
        return None
    layout = make_layout(policy, num_groups)
    return partial(attention_columns, layout) if SHARED_FORM.admits(layout) else None


def check_policy(policy: Policy) -> None:
    """The ConfigErrors a replay would raise for `policy` (its layout's, and a host tier's
    on the concurrent schedule), without building the block pool, which is as large as
    `num_blocks`."""
    layout = make_layout(policy, None)
    if layout.host_tier is not None and policy.schedule == "concurrent":
        check_host_schedule(policy)


def hit_alignment(policy: Policy) -> int:
    """Tokens every hit is a multiple of: the match unit when fine-grained hits are on
    (a Mamba group with blocks larger than the unit, and no sliding window), else the block."""
    unit = policy.hash_block_tokens
    fine = (
        "mamba" in policy.groups
        and unit < policy.block_size
        and "sliding_window" not in policy.groups
    )
    return unit if fine else policy.block_size
