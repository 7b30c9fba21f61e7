"""A stored replay run beside what a live engine observed (pure: `pipeline/validate.py`
reads the run and writes the result for `hpa validate`).

Two sources of observed figures, each compared with the run over one request window (all
requests of the run, or `since <= timestamp_s < until`):

- **per request**, `requests.cached_tokens` (the engine's cached prompt tokens, e.g. from
  `usage.prompt_tokens_details.cached_tokens`) against the replay's `hit_tokens`, per prompt
  family x model revision and overall. Requests without `cached_tokens` are not compared and
  are counted as `not_observed_requests` in every row.
- **server counters**, two saved vLLM `/metrics` texts (before and after the window; one file
  alone means the counters started at zero): the deltas of `vllm:prefix_cache_queries`,
  `vllm:prefix_cache_hits` and, when exported, `vllm:prefix_cache_sparse_retention_misses`,
  summed over label sets (optionally those with `model_name`), against the replay's sums of
  `prompt_tokens`, `hit_tokens` and `sparse_retention_miss_tokens` over the window. Deltas over
  the same window, never a total divided by an old one; a counter that went down (a server
  restart between the scrapes) is an error, not a negative delta.

Per row, in tokens: `observed_tokens`, `predicted_tokens`, `error_tokens` = predicted -
observed (positive: the replay promises more than the engine did), `relative_error` = error /
observed (NULL when nothing was observed but something was predicted), and for the per-request
source `mean_abs_error_tokens` (mean over compared requests of |hit - cached|) and
`exact_share` (share of compared requests where they are equal). Each validation is stored in
the `validations` table. Every replayed request of the window counts, warm-up ones too
(`--measure-from` does not apply: the engine counted them as well).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from analyzer.errors import ConfigError, InputFileError
from analyzer.metrics.exposition import format_labels, read_counters
from analyzer.traces.records import RecordError, parse_time_text
from analyzer.words import plural

ALL = "(all)"
CACHED = "requests.cached_tokens"
# (vLLM counter, replay figure it counts, required in a /metrics text)
COUNTERS = (
    ("vllm:prefix_cache_queries", "prompt_tokens", True),
    ("vllm:prefix_cache_hits", "hit_tokens", True),
    ("vllm:prefix_cache_sparse_retention_misses", "sparse_retention_miss_tokens", False),
)
SCHEMA = pa.schema(
    [
        ("source", pa.string()),
        ("figure", pa.string()),
        ("prompt_family", pa.string()),
        ("model_revision", pa.string()),
        ("requests", pa.int64()),
        ("not_observed_requests", pa.int64()),
        ("observed_tokens", pa.int64()),
        ("predicted_tokens", pa.int64()),
        ("error_tokens", pa.int64()),
        ("relative_error", pa.float64()),
        ("mean_abs_error_tokens", pa.float64()),
        ("exact_share", pa.float64()),
    ]
)


@dataclass(frozen=True)
class CounterDelta:
    """One counter's increase between two scrapes, summed over `label_sets`, in tokens."""

    name: str
    observed_tokens: int
    label_sets: int


@dataclass(frozen=True)
class Validation:
    validation_id: int
    run_id: int
    window: str  # in words: which requests of the run were compared
    requests: int  # replayed requests in the window
    observed_requests: int  # of them, with cached_tokens
    counters: tuple[CounterDelta, ...]  # empty without metrics files
    metrics_note: str | None  # where the counter deltas came from
    rows: pa.Table  # SCHEMA, per-request rows first, then counter rows
    causes: pa.Table | None = None  # the per-request error by cause (validate_causes)
    worst: pa.Table | None = None  # the requests with the largest |error|
    warning: str | None = None  # the observations come from another engine than replayed

    # The per-request source's name, as its rows and the stored table say.
    per_request_source = CACHED

    def table(self, source: str) -> pa.Table:
        """The rows of one source: CACHED, or "metrics" for every counter row."""
        keep = [(s == CACHED) == (source == CACHED) for s in self.rows.column("source").to_pylist()]
        return self.rows.filter(pa.array(keep, pa.bool_()))


def metrics_files(metrics, before, after) -> tuple[Path | None, Path | None]:
    """(before, after) paths; before None = counters from zero; after None = no metrics."""
    if metrics is not None and (before is not None or after is not None):
        raise ConfigError("--metrics: give it alone, or --metrics-before with --metrics-after")
    if (before is None) != (after is None):
        raise ConfigError("--metrics-before and --metrics-after: give both (or --metrics alone)")
    if metrics is not None:
        return None, Path(metrics)
    return (Path(before), Path(after)) if after is not None else (None, None)


def window_bounds(since: str | None, until: str | None) -> tuple[float, float]:
    """[start, end) in seconds of timestamp_s; (-inf, inf) when neither bound is given."""

    bounds = []
    for option, text, open_value in (("--since", since, -math.inf), ("--until", until, math.inf)):
        if text is None:
            bounds.append(open_value)
            continue
        try:
            bounds.append(parse_time_text(text))
        except RecordError as exc:
            reason = f"{exc.reason}; give seconds or RFC 3339"
            raise ConfigError(f"{option} {text!r}: {reason}") from None
    if not bounds[0] < bounds[1]:
        raise ConfigError(f"--since {since} must be before --until {until}")
    return bounds[0], bounds[1]


def describe_window(run_id: int, since, until, n: int | None = None) -> str:
    """'run 3, 10 <= timestamp_s < 20 (1,000 requests)', in words for messages."""
    text = f"run {run_id}"
    if since is not None or until is not None:
        lo = "" if since is None else f"{since} <= "
        hi = "" if until is None else f" < {until}"
        text += f", {lo}timestamp_s{hi}"
    return text if n is None else f"{text} ({plural(n, 'request')})"


def _row(source, figure, family, revision, *, requests, not_observed, observed, predicted):
    error = predicted - observed
    if observed:
        relative = error / observed
    else:
        relative = 0.0 if error == 0 else None
    return {
        "source": source,
        "figure": figure,
        "prompt_family": family,
        "model_revision": revision,
        "requests": requests,
        "not_observed_requests": not_observed,
        "observed_tokens": observed,
        "predicted_tokens": predicted,
        "error_tokens": error,
        "relative_error": relative,
        "mean_abs_error_tokens": None,
        "exact_share": None,
    }


def _request_rows(groups: list[dict]) -> list[dict]:
    """Per-request comparison per group, then the overall row (sums of the groups)."""
    if not any(g["observed_requests"] for g in groups):
        return []
    keys = ("requests", "observed_requests", "observed_tokens", "predicted_tokens")
    total = {k: sum(g[k] for g in groups) for k in (*keys, "abs_error_tokens", "exact_requests")}
    out = []
    for g, family, revision in [
        *((g, g["prompt_family"], g["model_revision"]) for g in groups),
        (total, ALL, ALL),
    ]:
        n = g["observed_requests"]
        row = _row(
            CACHED,
            "hit_tokens",
            family,
            revision,
            requests=n,
            not_observed=g["requests"] - n,
            observed=g["observed_tokens"],
            predicted=g["predicted_tokens"],
        )
        row["mean_abs_error_tokens"] = g["abs_error_tokens"] / n if n else None
        row["exact_share"] = g["exact_requests"] / n if n else None
        out.append(row)
    return out


def _counter_rows(groups: list[dict], deltas: tuple[CounterDelta, ...]) -> list[dict]:
    figures = {name: figure for name, figure, _ in COUNTERS}
    n = sum(g["requests"] for g in groups)
    return [
        _row(
            d.name,
            figures[d.name],
            ALL,
            ALL,
            requests=n,
            not_observed=None,
            observed=d.observed_tokens,
            predicted=sum(g[figures[d.name]] for g in groups),
        )
        for d in deltas
    ]


def counter_deltas(
    after: str | Path, before: str | Path | None = None, model_name: str | None = None
) -> tuple[CounterDelta, ...]:
    """Increase of each vLLM prefix-cache counter from `before` to `after` (from zero when
    `before` is None), summed over label sets (those with `model_name` when given).

    Raises:
        InputFileError: a file missing or malformed, queries or hits absent from `after`,
            a label set that vanished, or a counter that decreased (server restart).
    """
    wanted = frozenset(name for name, _, _ in COUNTERS)
    late = _by_name(read_counters(after, wanted), model_name)
    early = _by_name(read_counters(before, wanted), model_name) if before is not None else {}
    out = []
    for name, _, required in COUNTERS:
        now, then = late.get(name, {}), early.get(name, {})
        for labels, old in then.items():
            if labels not in now:
                raise InputFileError(
                    f"{after}: {name}{format_labels(labels)} (in {before}:{old.line_no}) is "
                    "missing: the server restarted or these are scrapes of different servers"
                )
        if not now:
            if required:
                raise _missing(after, name, model_name)
            continue
        out.append(CounterDelta(name, _delta(name, now, then, after, before), len(now)))
    return tuple(out)


def _delta(name: str, now: dict, then: dict, after, before) -> int:
    """Sum over label sets of now - then (a label set new in `now` started at zero)."""
    delta = 0
    for labels, sample in now.items():
        old = then.get(labels)
        if old is not None and sample.value < old.value:
            raise InputFileError(
                f"{after}:{sample.line_no}: {name}{format_labels(labels)} decreased from "
                f"{old.value} ({before}:{old.line_no}) to {sample.value}: the server "
                "restarted between the scrapes; take both from one server lifetime"
            )
        delta += sample.value - (old.value if old is not None else 0)
    return delta


def _by_name(samples, model_name: str | None) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for s in samples:
        if model_name is None or ("model_name", model_name) in s.labels:
            out.setdefault(s.name, {})[s.labels] = s
    return out


def _missing(path, name: str, model_name: str | None) -> InputFileError:
    if model_name is None:
        return InputFileError(
            f"{path}: no {name} counter; is this a saved vLLM /metrics text "
            "(vLLM with prefix caching and stats logging on)?"
        )
    known = {
        v for s in read_counters(path, frozenset([name])) for k, v in s.labels if k == "model_name"
    }
    shown = ", ".join(sorted(known)) or "none"
    return InputFileError(
        f"{path}: no {name} sample with model_name={model_name!r}; model names there: {shown}"
    )


def metrics_note(before, after, model_name, deltas) -> str:
    what = f"{after} - {before}" if before is not None else f"{after} (counters from zero)"
    who = f", model_name={model_name!r}" if model_name is not None else ""
    sets = max(d.label_sets for d in deltas)
    note = f"counter deltas of {what} over {sets} label set(s){who}"
    if not any(d.name == COUNTERS[2][0] for d in deltas):
        note += f"; {COUNTERS[2][0]} not exported by this vLLM (not compared)"
    return note


def validation_rows(groups: list[dict], deltas: tuple[CounterDelta, ...]) -> pa.Table:
    """The rows of one validation: the per-request source's (`groups`: the window's
    requests per family x revision, validate_requests.sql), then the counters' (`deltas`)."""
    return pa.Table.from_pylist(_request_rows(groups) + _counter_rows(groups, deltas), SCHEMA)
