"""Replay entry point: records in, results out, by the policy's engine (pure, no I/O).

    for result in replay(requests, policy):   # SimRequest in arrival order -> SimResult
        ...

The caller partitions requests by replica (and model revision); one call replays one cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from analyzer.errors import ConfigError
from analyzer.sim.policy import Policy
from analyzer.sim.records import SimRequest, SimResult

__all__ = ["SimRequest", "SimResult", "replay"]


def replay(
    requests: Iterable[SimRequest], policy: Policy, *, num_groups: dict[str, int] | None = None
) -> Iterator[SimResult]:
    """Replay `requests` serially (each admitted after the previous one finished).

    `num_groups`: KV-cache groups per type (default 1 each); only capacity (`num_blocks`) and
    vLLM's choice of coordinator (one group vs several) depend on it.
    """
    if policy.engine == "vllm":
        from analyzer.sim.vllm import replay as vllm_replay

        return vllm_replay(requests, policy, num_groups=num_groups)
    if policy.engine in ("attention_only", "oracle"):
        from analyzer.sim.bounds import replay as bound_replay

        return bound_replay(requests, policy, num_groups=num_groups)
    raise ConfigError(f"no replay for engine {policy.engine!r}")
