"""What the serial engines of docs/definitions.md#other-designs share (pure): the request loop, the
result of a request an engine cannot run, prefill chunking, and one check of the policy keys an
engine does not model. All lengths in tokens."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from analyzer.config.policy import Policy
from analyzer.errors import ConfigError
from analyzer.sim.records import SimRequest, SimResult

# The groups a pool of whole blocks with per-block state snapshots models (trtllm,
# llamacpp, suffix_replay): attention alone, or attention + Mamba.
BLOCK_GROUPS = (("full_attention",), ("full_attention", "mamba"))


class SerialReplay:
    """One cache replayed request by request, each finished before the next arrives."""

    def run(self, requests: Iterable[SimRequest]) -> Iterator[SimResult]:
        for request in requests:
            yield self.replay_one(request)

    def replay_one(self, sim: SimRequest) -> SimResult:
        raise NotImplementedError


def empty_result(sim: SimRequest, error: str) -> SimResult:
    """A request the engine could not run (an empty prompt, a pool too small for it): every
    counter 0, no chunks, `error` says why."""
    return SimResult(sim.request_id, sim.num_prompt_tokens, 0, 0, 0, 0, 0, 0, 0, (), error)


def budget_chunks(start: int, stops: Iterable[int], end: int, budget: int | None) -> list[int]:
    """Prefill chunks from token `start` to `end`: each ends at the next forced stop (> start)
    or after `budget` tokens (None = no budget), whichever comes first."""
    chunks = []
    pos = start
    stops = sorted(s for s in stops if start < s < end)
    stops.append(end)
    i = 0
    while pos < end:
        while stops[i] <= pos:
            i += 1
        stop = stops[i] if budget is None else min(stops[i], pos + budget)
        chunks.append(stop - pos)
        pos = stop
    return chunks


def check_unmodelled(
    policy: Policy,
    engine: str,
    *,
    placement: str,
    match_unit: bool = True,
    groups: tuple[tuple[str, ...], ...] | None = None,
    retention: tuple[int | None, ...] = (0, None),
) -> None:
    """ConfigError naming the key for what engine `policy.engine` does not model: speculative
    decoding, a match unit other than its block (when `match_unit`), a retention interval
    outside `retention` (vLLM's key: `placement` says what places the engine's states), groups
    outside `groups` (None: any)."""
    if policy.engine != engine:
        raise ConfigError(f"the {engine} replay cannot run engine {policy.engine!r}")
    if policy.spec_decode != "none":
        raise ConfigError(
            f"policy key 'spec_decode': engine {engine} does not model speculative decoding; "
            f"use none (got {policy.spec_decode!r})"
        )
    if match_unit and policy.prefix_match_unit not in (None, policy.block_size):
        raise ConfigError(
            f"policy key 'prefix_match_unit': engine {engine} matches whole blocks of "
            f"block_size {policy.block_size}; got {policy.prefix_match_unit}"
        )
    if policy.retention_interval not in retention:
        allowed = " or ".join("null" if r is None else str(r) for r in retention)
        raise ConfigError(
            f"policy key 'retention_interval': a vLLM key; engine {engine} places states by "
            f"{placement} (keep {allowed}, got {policy.retention_interval!r})"
        )
    if groups is not None and policy.groups not in groups:
        allowed = " or ".join(" + ".join(g) for g in groups)
        raise ConfigError(
            f"policy key 'groups': engine {engine} models {allowed}; "
            f"got {' + '.join(policy.groups)}"
        )
