"""Names of runs in `hpa report`: short in figures, whole in hovers and the configuration.

A run the user named (`--name`) is `run 12 · NAME`. Otherwise it is `run 12 · ENGINE`, then
what its policy changes from the most common value of each key across the runs shown, as
far as it fits in LABEL_CHANGES_CHARS (its engine's own options are left to the hover):
`run 2 · vllm · retention_interval=null`, `run 12 · llamacpp`. The full list of changes is
`policy_changes` (every run's hover and the configuration section).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter

LABEL_CHANGES_CHARS = 52
SEP = " · "
# A stored label (a family, a revision, a replica) on a figure's axis or legend: its first
# characters and a hash, so the plot keeps its room; tables show it to LABEL_MAX_CHARS.
FIGURE_LABEL_CHARS = 32
_CAPPED_HASH = re.compile(r"… \[[\d,]+ characters, sha256 ([0-9a-f]{8})\]$")


def figure_label(text: str) -> str:
    """A label of the report's frames (already `words.capped`) as a figure shows it: whole up
    to FIGURE_LABEL_CHARS + 12 characters, else its first FIGURE_LABEL_CHARS, "…" and 8 hex
    digits of the stored label's sha256 (the one its table row names: `FFFF… #5fa96f9a`), so
    two labels stay two bars."""
    if len(text) <= FIGURE_LABEL_CHARS + 12:
        return text
    tail = _CAPPED_HASH.search(text)
    digest = tail.group(1) if tail else hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    return f"{text[:FIGURE_LABEL_CHARS]}… #{digest}"


def policy_value(value) -> str:
    """A policy value as people write it: null, 2048, eagle_drop, [full_attention, mamba]."""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return "[" + ", ".join(policy_value(v) for v in value) + "]"
    return json.dumps(value)


def baseline(policies: list[dict]) -> dict:
    """Per key, the most common value across runs (ties: the earliest run's)."""
    base = {}
    for key in sorted({k for p in policies for k in p}):
        values = [json.dumps(p.get(key), sort_keys=True) for p in policies]
        counts = Counter(values)
        best = max(counts.values())
        base[key] = json.loads(next(v for v in values if counts[v] == best))
    return base


def changes(policy: dict, base: dict) -> list[str]:
    """`key=value` for every key where `policy` differs from `base`, sorted by key."""
    return [
        f"{k}={policy_value(policy.get(k))}" for k in sorted(policy) if policy.get(k) != base.get(k)
    ]


def changes_text(policy: dict, base: dict) -> str:
    return ", ".join(changes(policy, base)) or "baseline"


def _short(parts: list[str]) -> str:
    """The leading `parts` that fit in LABEL_CHANGES_CHARS, with "…" when some did not."""
    shown: list[str] = []
    for part in parts:
        if len(", ".join([*shown, part])) > LABEL_CHANGES_CHARS:
            return ", ".join(shown) + (", …" if shown else "…")
        shown.append(part)
    return ", ".join(shown)


def run_label(run_id: int, policy: dict, base: dict, name: str | None = None) -> str:
    if name:
        return f"run {run_id}{SEP}{name}"
    engine = policy.get("engine", "vllm")
    own = [c for c in changes(policy, base) if not c.startswith((f"{engine}_", "engine="))]
    label = f"run {run_id}{SEP}{engine}"
    return label + (SEP + _short(own) if own else "")


def run_labels(
    run_ids: list[int], policies: list[dict], names: list[str | None] | None = None
) -> list[str]:
    """Every run's short label (see the module doc), in the order given."""
    base = baseline(policies)
    names = names or [None] * len(run_ids)
    return [run_label(i, p, base, n) for i, p, n in zip(run_ids, policies, names, strict=True)]
