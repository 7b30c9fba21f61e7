"""A replay run's counters as Prometheus text exposition (format 0.0.4), from its rows
(pure: `pipeline/metrics.py` reads them for `hpa metrics`).

Families, in this order, each with HELP and TYPE lines, every sample labelled
`run`, `prompt_family` and `model_revision` (NULL labels become "(none)"):

- `vllm:prefix_cache_queries_total` (counter): queried prompt tokens, vLLM's name.
- `vllm:prefix_cache_hits_total` (counter): tokens reused from the GPU's hybrid cache, vLLM's
  name (a host tier's hits are not in it, as in vLLM).
- `vllm:prefix_cache_sparse_retention_misses_total` (counter): the name proposed in vLLM
  PR 52527: tokens full attention matched but a sparse group had no state for.
- `hpa_prefix_cache_lost_tokens_total{cause=...}` (counter): the loss waterfall
  (docs/definitions.md#the-loss-waterfall), one sample per cause: `unshared`, `routing`,
  `in_flight`, `granularity`, `eviction`, `sparse_retention_never_kept`, `sparse_retention_evicted`,
  `spec_decode`. The two `sparse_retention_*` causes split vLLM's sparse-retention misses, so for
  every label set hits + the sum over causes = queries.
- `hpa_replay_requests_total` (counter): replayed requests.

A run with a host KV tier (docs/definitions.md#the-host-kv-tier) adds, after those:

- `vllm:external_prefix_cache_hits_total` (counter): prompt tokens loaded from the host tier,
  vLLM's name for a KV connector's hits (the OffloadingConnector is one).
- `vllm:prompt_tokens_cached_by_source_total{source=device|host}` (counter): vLLM 0.33's hit
  tokens by the tier that supplied them (the GPU hit, the host hit).
- `hpa_host_tier_loads_total`, `hpa_host_tier_wait_steps_total`,
  `hpa_host_tier_wait_seconds_total` (counters): requests that waited for a host load, the
  engine steps and seconds they waited. vLLM's `vllm:kv_offload_load_time` is the transfers'
  time on the worker, not a request's wait, so these keep hpa's own names.
- `hpa_host_tier_lost_tokens_total{cause=evicted|never_stored}` (counter): what the tier did
  not give back beyond its hits: tokens it had stored then evicted, tokens it never stored
  (vLLM has no such counter).
- `hpa_host_tier_never_stored_tokens_total{kind=no_slot|decode|sparse}` (counter): the
  tokens never stored by kind, each a lever's (the tier's size, `offload_prompt_only`, the
  sparse groups' spacing); they sum to `cause="never_stored"`.

Then hits (GPU) + external hits + the sum over causes = queries.

Values are the replay's sums over the whole trace (a counter that ends the trace); samples
are sorted by prompt family, model revision, then cause, so the text is deterministic.
"""

from __future__ import annotations

from analyzer.config.host_tier import NEVER_STORED

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
_HOST_HITS = (
    "vllm:external_prefix_cache_hits_total",
    "Prompt tokens loaded from the host KV tier (the OffloadingConnector's CPU backend), "
    "not recomputed (replayed by hpa).",
    "host_hit_tokens",
)
_HOST_LOST = (
    "hpa_host_tier_lost_tokens_total",
    "Prompt tokens the host KV tier did not give back beyond its hits: stored then evicted, "
    "or never stored (decode tokens, sparse boundaries the GPU did not keep, dropped offers).",
    (("evicted", "host_evicted_tokens"), ("never_stored", "host_never_stored_tokens")),
)
_NEVER_STORED = (
    "hpa_host_tier_never_stored_tokens_total",
    "Prompt tokens the host KV tier never stored, by kind: offers dropped for want of a slot, "
    "chunks past a prompt under prompt-only, sparse states the GPU did not keep; they sum "
    'to hpa_host_tier_lost_tokens_total{cause="never_stored"}.',
    tuple((k.kind, k.column) for k in NEVER_STORED),
)
_BY_SOURCE = (
    "vllm:prompt_tokens_cached_by_source_total",
    "Prefix-cache hit tokens by the tier that supplied them: device (GPU) or host "
    "(replayed by hpa).",
)
_HOST_WAITS = (
    (
        "hpa_host_tier_loads_total",
        "Requests that waited for a load from the host KV tier.",
        "host_loads",
    ),
    (
        "hpa_host_tier_wait_steps_total",
        "Engine steps requests waited for host KV tier loads (WAITING_FOR_REMOTE_KVS).",
        "host_wait_steps",
    ),
    (
        "hpa_host_tier_wait_seconds_total",
        "Seconds requests waited for host KV tier loads.",
        "host_wait_s",
    ),
)


def escape_label_value(value: str) -> str:
    """A label value for the text format: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(value: str) -> str:
    """HELP text for the text format: backslash and newline escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs) + "}"


def render_counters(run_id: int, rows: list[dict], host_tier: bool = False) -> str:
    """The exposition text of `rows` (one dict per prompt family x model revision);
    `host_tier`: the run had a host KV tier (its families follow the others)."""
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
        out.extend(f"{name}{_labels(base(r))} {int(_value(r, column))}" for r in rows)
    name, help_text = _LOST
    family(name, help_text)
    for r in rows:
        for cause, column in CAUSE_LABELS:
            out.append(f"{name}{_labels([*base(r), ('cause', cause)])} {int(r[column])}")
    name, help_text = _REQUESTS
    family(name, help_text)
    out.extend(f"{name}{_labels(base(r))} {int(r['requests'])}" for r in rows)
    if not host_tier:
        return "\n".join(out) + "\n"
    name, help_text, column = _HOST_HITS
    family(name, help_text)
    out.extend(f"{name}{_labels(base(r))} {int(r[column])}" for r in rows)
    name, help_text = _BY_SOURCE
    family(name, help_text)
    for r in rows:
        for source, value in (("device", _value(r, "hit_tokens")), ("host", r["host_hit_tokens"])):
            out.append(f"{name}{_labels([*base(r), ('source', source)])} {int(value)}")
    for name, help_text, column in _HOST_WAITS:
        family(name, help_text)
        out.extend(f"{name}{_labels(base(r))} {_number(r[column])}" for r in rows)
    for (name, help_text, causes), label in ((_HOST_LOST, "cause"), (_NEVER_STORED, "kind")):
        family(name, help_text)
        for r in rows:
            for cause, column in causes:
                out.append(f"{name}{_labels([*base(r), (label, cause)])} {int(r[column])}")
    return "\n".join(out) + "\n"


def _value(row: dict, column: str) -> float:
    """A sample's value: vLLM's prefix_cache_hits are the GPU's, so a host hit is not one."""
    if column == "hit_tokens":
        return row["hit_tokens"] - row.get("host_hit_tokens", 0)
    return row[column]


def _number(value: float) -> str:
    """A counter's value: whole numbers as integers, seconds with repr's shortest digits."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
