"""A replay run's counters as Prometheus text exposition (format 0.0.4), from its rows
(pure: `pipeline/metrics.py` reads them for `hpa metrics`).

Families, in this order, each with HELP and TYPE lines, every sample labelled
`run`, `prompt_family` and `model_revision` (NULL labels become "(none)"):

- `vllm:prefix_cache_queries_total` (counter): queried prompt tokens, vLLM's name.
- `vllm:prefix_cache_hits_total` (counter): tokens reused by the hybrid cache, vLLM's name.
- `vllm:prefix_cache_sparse_retention_misses_total` (counter): the name proposed in vLLM
  PR 52527: tokens full attention matched but a sparse group had no state for.
- `hpa_prefix_cache_lost_tokens_total{cause=...}` (counter): the loss waterfall
  (docs/definitions.md#the-loss-waterfall), one sample per cause: `unshared`, `routing`,
  `in_flight`, `granularity`, `eviction`, `sparse_retention_never_kept`, `sparse_retention_evicted`,
  `spec_decode`. The two `sparse_retention_*` causes split vLLM's sparse-retention misses, so for
  every label set hits + the sum over causes = queries.
- `hpa_replay_requests_total` (counter): replayed requests.

Values are the replay's sums over the whole trace (a counter that ends the trace); samples
are sorted by prompt family, model revision, then cause, so the text is deterministic.
"""

from __future__ import annotations

# (cause label, replay_requests column), in waterfall order.
CAUSE_LABELS = (
    ("unshared", "unshared_tokens"),
    ("routing", "lost_routing_tokens"),
    ("in_flight", "lost_in_flight_tokens"),
    ("granularity", "lost_granularity_tokens"),
    ("eviction", "lost_eviction_tokens"),
    ("sparse_retention_never_kept", "sparse_retention_miss_never_kept_tokens"),
    ("sparse_retention_evicted", "sparse_retention_miss_evicted_tokens"),
    ("spec_decode", "lost_spec_decode_tokens"),
)

# (metric name, help, column) of the families with one sample per label set.
_PLAIN = (
    (
        "vllm:prefix_cache_queries_total",
        "Prompt tokens queried against the prefix cache (replayed by hpa).",
        "prompt_tokens",
    ),
    (
        "vllm:prefix_cache_hits_total",
        "Prompt tokens reused from the hybrid prefix cache (replayed by hpa).",
        "hit_tokens",
    ),
    (
        "vllm:prefix_cache_sparse_retention_misses_total",
        "Tokens full attention matched but a sparse group (Mamba, sliding window) had no "
        "valid state for, so the hit could not use them (replayed by hpa).",
        "sparse_retention_miss_tokens",
    ),
)
_LOST = (
    "hpa_prefix_cache_lost_tokens_total",
    "Queried prompt tokens the cache did not reuse, by loss-waterfall cause; hits plus "
    "all causes equal queries.",
)
_REQUESTS = ("hpa_replay_requests_total", "Requests replayed.")


def escape_label_value(value: str) -> str:
    """A label value for the text format: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(value: str) -> str:
    """HELP text for the text format: backslash and newline escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs) + "}"


def render_counters(run_id: int, rows: list[dict]) -> str:
    """The exposition text of `rows` (one dict per prompt family x model revision)."""
    rows = sorted(rows, key=lambda r: (r["prompt_family"], r["model_revision"]))
    out: list[str] = []

    def family(name: str, help_text: str) -> None:
        out.append(f"# HELP {name} {escape_help(help_text)}")
        out.append(f"# TYPE {name} counter")

    def base(row: dict) -> list[tuple[str, str]]:
        return [
            ("run", str(run_id)),
            ("prompt_family", row["prompt_family"]),
            ("model_revision", row["model_revision"]),
        ]

    for name, help_text, column in _PLAIN:
        family(name, help_text)
        out.extend(f"{name}{_labels(base(r))} {int(r[column])}" for r in rows)
    name, help_text = _LOST
    family(name, help_text)
    for r in rows:
        for cause, column in CAUSE_LABELS:
            out.append(f"{name}{_labels([*base(r), ('cause', cause)])} {int(r[column])}")
    name, help_text = _REQUESTS
    family(name, help_text)
    out.extend(f"{name}{_labels(base(r))} {int(r['requests'])}" for r in rows)
    return "\n".join(out) + "\n"
