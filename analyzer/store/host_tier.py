"""Whether a stored run replayed a host KV tier (docs/definitions.md#the-host-kv-tier), from
its policy as replay_runs keeps it: the report, `hpa compare` and `hpa metrics` show the
tier's figures only for such runs, so a run without one reads as it always did."""

from __future__ import annotations

import json
from typing import Any


def has_host_tier(policy: dict[str, Any] | str | None) -> bool:
    """True when the policy (a dict or its stored JSON) sizes a host tier: `host_tier_gib`
    above 0 or a `host_tier_chunks` slot count (both absent at their defaults)."""
    if policy is None:
        return False
    if isinstance(policy, str):
        policy = json.loads(policy)
    gib = policy.get("host_tier_gib") or 0
    return gib > 0 or policy.get("host_tier_chunks") is not None
