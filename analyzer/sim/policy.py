"""Policies the replay can run: a configuration policy (`analyzer.config.policy`) that the
engine it names has also accepted (`analyzer.sim.dispatch.check_engine`), so a key the engine
does not model is an error before any request runs."""

from __future__ import annotations

from typing import Any

from analyzer.config.policy import Policy, build_policy, policy_values
from analyzer.sim.dispatch import check_engine


def make_policy(values: dict[str, Any]) -> Policy:
    """A validated Policy from a dict of SPEC 5 keys, checked by its engine."""
    policy = build_policy(values)
    check_engine(policy)
    return policy


def load_policy(source: str | None, overrides: list[str] = ()) -> Policy:
    """A policy from a preset name or a JSON/TOML file, then `--set` overrides."""
    return make_policy(policy_values(source, overrides))
