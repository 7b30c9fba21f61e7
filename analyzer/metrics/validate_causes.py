"""`hpa validate`'s error by cause, its worst requests, and who reported the observation.

Per compared request (one with `cached_tokens`), error = predicted - observed = hit_tokens -
cached_tokens, split by what explains it:

- **under-prediction** (the engine cached more than the replay's hit): its extra cached
  tokens are given back to the replay's losses, from the hit up the waterfall (the loss the
  replay applied last first): speculative decoding, sparse retention, eviction, granularity,
  in flight, routing, then unshared (a prefix not earlier in the trace: the first request
  of a session, or one the engine had cached from traffic outside the trace). Each cause
  takes at most its own tokens; as cached_tokens <= prompt_tokens, the causes always cover it.
- **over-prediction** (the replay's hit is more than the engine cached): the engine cached
  none of the request (a cold or different replica, caching off) or part of it.

`error_tokens` per cause is signed like the error (under-prediction negative), so the causes
add up to the total error. Sums of the `validation_causes` table.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from analyzer.words import plural

# (cause, replay_requests column, what the engine did that the replay did not), in the order
# the engine's extra cached tokens are given back to the replay's losses
UNDER = (
    ("spec_decode", "lost_spec_decode_tokens", "hit past the replay's speculative-decoding loss"),
    (
        "sparse_retention",
        "sparse_retention_miss_tokens",
        "kept a recurrent state the replay's retention dropped",
    ),
    ("eviction", "lost_eviction_tokens", "still held blocks the replay evicted"),
    ("granularity", "lost_granularity_tokens", "matched finer than the replay's block or unit"),
    ("in_flight", "lost_in_flight_tokens", "reused a prefix the replay had still in flight"),
    ("routing", "lost_routing_tokens", "shared a prefix the replay held on another replica"),
    (
        "unshared",
        "unshared_tokens",
        "cached a prefix not earlier in the trace (first in session, or outside traffic)",
    ),
)
OVER = (
    ("over_uncached", "cached nothing of a request the replay hit"),
    ("over_partial", "cached less of a request than the replay hit"),
)
CAUSE_SCHEMA = pa.schema(
    [
        ("cause", pa.string()),
        ("engine_did", pa.string()),
        ("requests", pa.int64()),
        ("error_tokens", pa.int64()),
        ("share_of_abs_error", pa.float64()),
    ]
)
WORST_COLUMNS = (
    "request_id",
    "prompt_family",
    "model_revision",
    "prompt_tokens",
    "observed_tokens",
    "predicted_tokens",
    "error_tokens",
    "cause",
)
# Who reported cached_tokens, by the source's format (TraceLab: its provider's API cache).
OBSERVERS = {"sglang_log": "sglang", "vllm_log": "vllm"}


def _array(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy().astype(np.int64)


def split(compared: pa.Table) -> dict[str, np.ndarray]:
    """Per request and cause, its signed part of the error (tokens; UNDER then OVER)."""
    hit, observed = _array(compared, "predicted_tokens"), _array(compared, "observed_tokens")
    left = np.maximum(observed - hit, 0)
    out = {}
    for cause, column, _ in UNDER:
        taken = np.minimum(left, _array(compared, column))
        out[cause] = -taken
        left -= taken
    if left.any():
        i = int(np.flatnonzero(left)[0])
        raise AssertionError(f"validate: request index {i} cached more than its prompt")
    over = np.maximum(hit - observed, 0)
    out["over_uncached"] = np.where(observed == 0, over, 0)
    out["over_partial"] = np.where(observed == 0, 0, over)
    return out


def cause_table(parts: dict[str, np.ndarray]) -> pa.Table:
    """One row per cause: requests it explains part of, its signed tokens, share of |error|."""
    words = {c: w for c, _, w in UNDER} | dict(OVER)
    total = sum(int(np.abs(v).sum()) for v in parts.values())
    rows = []
    for cause, part in parts.items():
        tokens = int(part.sum())
        rows.append(
            {
                "cause": cause,
                "engine_did": words[cause],
                "requests": int(np.count_nonzero(part)),
                "error_tokens": tokens,
                "share_of_abs_error": abs(tokens) / total if total else 0.0,
            }
        )
    return pa.Table.from_pylist(rows, schema=CAUSE_SCHEMA)


def worst(compared: pa.Table, parts: dict[str, np.ndarray], limit: int = 10) -> pa.Table:
    """The `limit` requests with the largest |error|, first in arrival order on ties, each
    with the cause that holds most of its error."""
    error = _array(compared, "predicted_tokens") - _array(compared, "observed_tokens")
    order = np.argsort(-np.abs(error), kind="stable")
    order = order[error[order] != 0][:limit]
    names = list(parts)
    stacked = np.abs(np.stack([parts[c][order] for c in names]))
    picked = compared.take(pa.array(order, pa.int64()))
    table = picked.select(list(WORST_COLUMNS[:6])).append_column(
        "error_tokens", pa.array(error[order], pa.int64())
    )
    causes = [names[i] for i in stacked.argmax(axis=0)] if order.size else []
    return table.append_column("cause", pa.array(causes, pa.string()))


def observers(compared: pa.Table) -> dict[str, int]:
    """Who reported the observed cached_tokens -> requests: an engine name, a TraceLab
    provider's API cache, or "unknown" (a plain trace does not say)."""
    formats = compared.column("observed_format").to_pylist()
    providers = compared.column("observed_provider").to_pylist()
    out: dict[str, int] = {}
    for fmt, provider in zip(formats, providers, strict=True):
        if fmt == "tracelab":
            who = f"{provider or 'an unnamed provider'}'s API cache"
        else:
            who = OBSERVERS.get(fmt, "unknown")
        out[who] = out.get(who, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def engine_warning(found: dict[str, int], engine: str) -> str | None:
    """A warning when a known reporter of the observations is not the engine replayed."""
    others = {who: n for who, n in found.items() if who not in ("unknown", engine)}
    if not others:
        return None
    listed = ", ".join(f"{who} ({plural(n, 'request')})" for who, n in others.items())
    return (
        f"warning: the observed cached_tokens come from {listed}, not from {engine}, the "
        "engine replayed: part of the error is their design (block size, eviction, what "
        "they keep), not the traffic"
    )
