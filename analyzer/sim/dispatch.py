"""Replay entry point: records in, results out, by the policy's engine (pure, no I/O).

    for result in replay(requests, policy):   # SimRequest in arrival order -> SimResult
        ...

The caller partitions requests by replica (and model revision); one call replays one cache.
Each engine is a package under analyzer/sim/, named by its row of the engine table
(`analyzer.config.engines`), exposing
`replay(requests, policy, *, num_groups=None) -> Iterator[SimResult]`, optionally
`check_policy(policy)` (validation without building the cache) and, when its hits are
not whole blocks, `hit_alignment(policy) -> int` (tokens every hit and attention match is a
multiple of; default `policy.block_size`). The waterfall floors its L3 level to it. An engine
whose results follow, for some policies, from each request's shared prefix in its cache
exposes `replay_from_shared(policy, *, num_groups) -> function | None` (see below).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from analyzer.config.engines import engine
from analyzer.config.policy import Policy, build_policy, policy_values
from analyzer.sim.records import ResultColumns, SimRequest, SimResult

__all__ = [
    "SimRequest",
    "SimResult",
    "check_engine",
    "hit_alignment",
    "load_policy",
    "make_policy",
    "replay",
    "replay_from_shared",
]


def _engine(policy: Policy):
    # The table names each engine's module; importing on first use keeps config below sim.
    return importlib.import_module(engine(policy.engine).module)


def hit_alignment(policy: Policy) -> int:
    """Tokens every hit of the policy's engine is a multiple of."""
    module = _engine(policy)
    align = getattr(module, "hit_alignment", None)
    return align(policy) if align is not None else policy.block_size


def check_engine(policy: Policy) -> None:
    """Raise the engine's own ConfigError for a policy it cannot replay (e.g. a group or a
    key it does not model), before any request runs. An engine whose construction is costly
    (vLLM builds its block pool) exposes a `check_policy(policy)` that only validates; the
    others check at construction, so an empty replay validates them."""
    module = _engine(policy)
    check = getattr(module, "check_policy", None)
    if check is not None:
        check(policy)
        return
    for _ in module.replay((), policy):
        pass


def replay(
    requests: Iterable[SimRequest], policy: Policy, *, num_groups: dict[str, int] | None = None
) -> Iterator[SimResult]:
    """Replay `requests` serially (each admitted after the previous one finished).

    `num_groups`: KV-cache groups per type (default 1 each); only capacity (`num_blocks`) and
    vLLM's choice of coordinator (one group vs several) depend on it.
    """
    return _engine(policy).replay(requests, policy, num_groups=num_groups)


def replay_from_shared(
    policy: Policy, *, num_groups: dict[str, int] | None = None
) -> Callable[..., ResultColumns] | None:
    """Where the policy's serial results follow from shared prefixes alone, a function
    `(request_ids, prompt_tokens, shared_tokens) -> columns` giving `replay`'s results (as
    `records.result_columns` lays them out, but for `chunks`) for token-id requests
    (arrival order; their ids and prompt lengths) of one or many caches at once, from
    `shared_tokens`: each prompt's longest prefix shared with the tokens the earlier
    requests of its cache and namespace computed (prompt + outputs but the last). Else None.
    """
    found = getattr(_engine(policy), "replay_from_shared", None)
    return found(policy, num_groups=num_groups) if found is not None else None


# Policies the replay can run: a configuration policy (`analyzer.config.policy`) that the
# engine it names has also accepted (`check_engine`), so a key the engine does not model is
# an error before any request runs.
def make_policy(values: dict[str, Any]) -> Policy:
    """A validated Policy from a dict of policy keys (docs/definitions.md#replay-policies), checked
    by its engine."""
    policy = build_policy(values)
    check_engine(policy)
    return policy


def load_policy(source: str | None, overrides: list[str] = ()) -> Policy:
    """A policy from a preset name or a JSON/TOML file, then `--set` overrides."""
    return make_policy(policy_values(source, overrides))
