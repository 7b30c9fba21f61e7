"""Attribute a change of the useful hit ratio to loss causes
(docs/definitions.md#the-loss-waterfall), from two sides' rows (pure: `pipeline/compare.py` reads
them from the store for `hpa compare`).

Two sides, each a set of replayed requests:

- two time windows of one run (`window` = the current side, `baseline`), each
  `START..END` in seconds of the trace's `timestamp_s` or RFC 3339 date-times, half-open
  (`START <= timestamp_s < END`; an empty end is open); or
- two runs of the same trace (`runs=(A, B)`: A is the baseline, B the current side).

Per prompt family x model revision (plus "(all)" roll-ups), each side's tokens per figure
(the hit and every waterfall cause) are divided by **that side's** queried tokens: windows
hold different numbers of requests, so only shares of the same window are compared, never a
total divided by another window's. `change_points` = current share - baseline share, in
percentage points. `contribution_points` = the group's part of the change of the overall
share, a symmetric shift-share against the overall share R (the mean of the two sides'):
`rate_effect_points` (mean traffic share x change of the group's own share: the group's
figure moved) + `mix_effect_points` ((mean own share - R) x change of its traffic share: the
traffic moved to or from a group above or below the whole); these add up, over groups, to the
change of the overall share (see attribution._shift_share).
Each side's traffic shape (requests, rate, prompt lengths, labels) is `traffic`.

The closing sentence names the overall change of the useful hit ratio, the cause whose
overall share moved most in the same direction, and the group where it moved most: the
group's own change in points weighted by its mean share of queried tokens (the rate effect),
among groups present on both sides (a family's "(all)" roll-up when its model revisions
differ between the sides).

Estimated TTFT: per model revision, ttft_ms = a + b * fresh_prefill_tokens fitted by least
squares (`analyzer.metrics.ttft`) over the requests of one run that carry `ttft_ms` (the
window's run, or the baseline run A), applied to both sides; without `ttft_ms` a model preset's
`prefill_cost` ({"a_ms", "b_ms_per_token"}) is used when it has one, else the TTFT change is
reported as unavailable.

Simulated TTFT: when both sides are concurrent replays (`schedule: concurrent`), each group
also carries the mean simulated TTFT and queue time of its requests (vLLM's scheduler on the
replay's clock, `ttft_s` and `queue_s`), and the sentence reports their change instead of the
estimate: how much of a TTFT change queueing explains. In-flight losses
(`lost_in_flight_tokens`) are a cause like the others.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

import orjson
import pyarrow as pa

from analyzer.config.host_tier import NEVER_STORED, never_stored_words
from analyzer.config.models import load_model
from analyzer.errors import ConfigError
from analyzer.metrics.attribution import FIGURES, build_tables
from analyzer.metrics.ttft import TtftFit, fit_by_revision
from analyzer.traces.records import RecordError, parse_time_text
from analyzer.words import plural, signed_term


@dataclass(frozen=True)
class Window:
    """Half-open [start_s, end_s) in seconds (infinite for an open end); `text` as given."""

    text: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Side:
    name: str  # "baseline" or "current"
    run_id: int
    window: Window | None
    requests: int

    def where(self) -> str:
        """'run 3, window 10..20 (1,000 requests)'."""
        where = f"run {self.run_id}"
        if self.window is not None:
            where += f", window {self.window.text}"
        return f"{where} ({plural(self.requests, 'request')})"

    def describe(self) -> str:
        return f"{self.name}: {self.where()}"


@dataclass
class Comparison:
    baseline: Side
    current: Side
    groups: pa.Table  # one row per prompt family x model revision (+ roll-ups)
    causes: pa.Table  # one row per group x figure
    traffic: pa.Table  # one row per measure of the traffic's shape (TRAFFIC), both sides
    fit_run: int
    fits: dict[str, TtftFit | None]
    ttft_source: str  # "trace ttft_ms", "model preset", or "unavailable"
    ttft_note: str
    sentence: str
    notes: tuple[str, ...] = ()  # caveats: windows over timestamps an adapter made
    # what makes the comparison say less than it seems: overlapping windows, a run with itself
    warnings: tuple[str, ...] = ()
    # revisions whose observed TTFT is of another model than the replay's (`model`): their
    # fits estimate nothing (`other_model_revisions`)
    other_models: tuple[str, ...] = ()
    model: str | None = None
    # a host KV tier's figures per side (host_tier_figures), or None where neither has one
    host_tier: dict[str, dict] | None = None

    def host_lines(self) -> list[str]:
        """One line per side on its host KV tier (none where neither side has one)."""
        if self.host_tier is None:
            return []
        lines = []
        for name, h in self.host_tier.items():
            wait = h["host_wait_mean_s"]
            mean = "" if wait is None else f", mean wait {wait * 1000:,.2f} ms"
            lines.append(
                f"host KV tier, {name}: {h['host_hit_ratio']:.1%} of prompt tokens from the "
                f"host ({h['host_hit_tokens']:,} tokens), "
                f"{plural(h['host_waited_requests'], 'request')} waited for a load{mean}; "
                f"not given back: {h['host_evicted_tokens']:,} tokens stored then evicted, "
                f"{never_stored_words(h)}"
            )
        return lines

    def fit_lines(self) -> list[str]:
        if self.ttft_source != "trace ttft_ms":
            return [self.ttft_note]
        lines = []
        for rev, fit in self.fits.items():
            if fit is None:
                lines.append(
                    f"TTFT fit {rev} (run {self.fit_run}): not enough distinct fresh-prefill counts"
                )
                continue
            line = (
                f"TTFT fit {rev} (run {self.fit_run}): ttft_ms = {fit.a_ms:.1f} "
                f"{signed_term(fit.b_ms_per_token, '.5f')} x fresh_prefill_tokens "
                f"(R^2 {fit.r2:.3f}, n {fit.n:,})"
            )
            if rev in self.other_models:
                line += (
                    f"; not used for TTFT estimates: observed on {rev}, another model than "
                    f"the replay's {self.model}"
                )
            elif not _usable(fit):
                line += (
                    f"; not used for TTFT estimates (it needs R^2 >= {MIN_FIT_R2} and a "
                    "positive slope)"
                )
            lines.append(line)
        return lines

    # compare's figure name -> its replay_requests column (the hit, then each cause)
    figure_columns = {fig: col for fig, col, _ in FIGURES}

    def traffic_cells(self) -> list[tuple[str, str, str, str]]:
        """The traffic table as text: (measure, baseline, current, change) per measure;
        requests/s to 3 significant digits however slow, the rest whole numbers."""
        out = []
        for r in self.traffic.to_pylist():
            rate = r["measure"] == "requests_per_s"
            shown = [
                "" if v is None else (f"{v:,.3g}" if rate else f"{v:,.0f}")
                for v in (r["baseline"], r["current"])
            ]
            change = r["change_percent"]
            out.append((r["measure"], *shown, "" if change is None else f"{change:+.1f}%"))
        return out

    def traffic_lines(self) -> list[str]:
        """The traffic table as aligned text: one row per measure, both sides, the change."""
        cells = [("traffic", "baseline", "current", "change"), *self.traffic_cells()]
        widths = [max(len(row[i]) for row in cells) for i in range(4)]
        return [
            "  ".join(
                [row[0].ljust(widths[0])]
                + [c.rjust(w) for c, w in zip(row, widths, strict=True)][1:]
            )
            for row in cells
        ]

    def to_json(self) -> bytes:
        def side(s: Side) -> dict:
            w = s.window
            return {
                "run_id": s.run_id,
                "window": None
                if w is None
                else {"text": w.text, "start_s": _finite(w.start_s), "end_s": _finite(w.end_s)},
                "requests": s.requests,
            }

        doc = {
            "baseline": side(self.baseline),
            "current": side(self.current),
            "ttft_model": {
                "source": self.ttft_source,
                "fit_run": self.fit_run,
                "note": self.ttft_note,
                "fits": {k: (None if v is None else v.as_dict()) for k, v in self.fits.items()},
                "other_model_revisions": list(self.other_models),
            },
            "traffic": self.traffic.to_pylist(),
            "groups": self.groups.to_pylist(),
            "causes": self.causes.to_pylist(),
            "sentence": self.sentence,
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }
        if self.host_tier is not None:
            doc["host_tier"] = self.host_tier
        return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def _letters(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def other_model_revisions(revisions: list[str], model: str | None) -> tuple[str, ...]:
    """The model revisions whose name does not name `model` (the replay's model preset):
    their requests were served, and their TTFT observed, by another model (WEKA's
    claude-sonnet-4-5-20250929 against a qwen3-next-80b-a3b replay). None without a model
    or with a model file (whose name need not be the served model's), and never the
    requests without a revision ('(none)')."""
    if not model or "/" in model or model.endswith((".json", ".toml")):
        return ()
    name = _letters(model)
    return tuple(r for r in revisions if r != "(none)" and name not in _letters(r))


def plan_command(
    db_path: str, model: str | None, window: Window | None, overrides: tuple[str, ...] = ()
) -> str:
    """The `hpa plan` command, but its target, that sizes the pool for the current side:
    its database and model, its window (measured after the requests before it), and the
    run's policy keys a plan would not take by default (`--set KEY=VALUE` each)."""
    words = ["hpa", "plan", "--db", str(db_path)]
    if model is not None:
        words += ["--model", model]
    if window is not None:
        words += ["--window", window.text]
    for item in overrides:
        words += ["--set", item]
    return shlex.join(words)


def seconds_text(x: float) -> str:
    """Seconds as written in a window (1774000000.5, never 1.774e+09; '' for an open end)."""
    return f"{x:.3f}".rstrip("0").rstrip(".") if math.isfinite(x) else ""


def overlap_warning(current: Window, baseline: Window) -> str | None:
    """The warning for two windows that share time (None when they do not): the requests
    in both are on both sides, so the change understates what moved."""
    start, end = max(current.start_s, baseline.start_s), min(current.end_s, baseline.end_s)
    if not start < end:
        return None
    both = f"{seconds_text(start)}..{seconds_text(end)}"
    return (
        f"the window {current.text} and the baseline {baseline.text} overlap ({both} s): "
        "the requests of that time are on both sides, so the change understates what moved"
    )


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def parse_window(text: str) -> Window:
    """`START..END` (seconds or RFC 3339 with an offset; either end may be empty = open).

    Raises:
        ConfigError: not of that form, an end that is neither, or START >= END.
    """

    example = "expected START..END in seconds of the trace's timestamps or RFC 3339, e.g. 0..300"
    if not isinstance(text, str) or ".." not in text:
        raise ConfigError(f"bad window {text!r}: {example}")
    start_text, end_text = (part.strip() for part in text.split("..", 1))
    bounds = []
    for label, part, open_value in (("start", start_text, -math.inf), ("end", end_text, math.inf)):
        if part == "":
            bounds.append(open_value)
            continue
        try:
            bounds.append(parse_time_text(part))
        except RecordError as exc:
            raise ConfigError(f"bad window {text!r}: {label}: {exc.reason}; {example}") from None
    start, end = bounds
    if not start < end:
        raise ConfigError(f"bad window {text!r}: start must be before end")
    return Window(text, start, end)


# A fit explains too little below this to estimate TTFT changes from (a preset's prefill
# cost, with no R^2, is always used).
MIN_FIT_R2 = 0.25


def _usable(fit: TtftFit | None) -> bool:
    """Whether `fit` may estimate TTFT: a positive slope and R^2 >= MIN_FIT_R2 (or none:
    a model preset's cost)."""
    if fit is None or fit.b_ms_per_token <= 0:
        return False
    return math.isnan(fit.r2) or fit.r2 >= MIN_FIT_R2


# (measure, unit) of each side's traffic shape, in the order printed (compare_traffic.sql)
TRAFFIC = (
    ("requests", "requests"),
    ("requests_per_s", "requests/s"),
    ("prompt_tokens", "tokens"),
    ("mean_prompt_tokens", "tokens"),
    ("p50_prompt_tokens", "tokens"),
    ("p90_prompt_tokens", "tokens"),
    ("max_prompt_tokens", "tokens"),
    ("span_s", "s"),
    ("prompt_families", "labels"),
    ("model_revisions", "labels"),
    ("conversations", "labels"),
)


def _traffic_table(base: dict, cur: dict) -> pa.Table:
    """measure, unit, baseline, current, change_percent (current / baseline - 1, in %)."""
    rows = []
    for name, unit in TRAFFIC:
        b, c = base[name], cur[name]
        change = 100.0 * (c / b - 1) if b and c is not None else None
        rows.append(
            {
                "measure": name,
                "unit": unit,
                "baseline": None if b is None else float(b),
                "current": None if c is None else float(c),
                "change_percent": change,
            }
        )
    return pa.Table.from_pylist(rows, schema=_TRAFFIC_SCHEMA)


_TRAFFIC_SCHEMA = pa.schema(
    [
        ("measure", pa.string()),
        ("unit", pa.string()),
        ("baseline", pa.float64()),
        ("current", pa.float64()),
        ("change_percent", pa.float64()),
    ]
)


def check_request(window: str | None, baseline: str | None, runs: tuple[int, ...]):
    """(windowed, the current window, the baseline window) of a valid request: two windows
    of one run, or two runs.

    Raises:
        ConfigError: a bad combination of arguments, or a bad window.
    """
    windowed = window is not None or baseline is not None
    usage = "give --window START..END --baseline START..END [--run RUN], or --run A --run B"
    if windowed and len(runs) > 1:
        raise ConfigError(f"--window/--baseline compare one run, got {len(runs)} --run; {usage}")
    if windowed and (window is None or baseline is None):
        missing = "--baseline" if baseline is None else "--window"
        raise ConfigError(f"{missing} is missing; {usage}")
    if not windowed and len(runs) == 1:
        raise ConfigError(f"one --run needs --window and --baseline, or a second --run; {usage}")
    if not windowed and len(runs) != 2:
        raise ConfigError(f"nothing to compare; {usage}")
    if not windowed:
        return False, None, None
    return True, parse_window(window), parse_window(baseline)


@dataclass(frozen=True)
class SideRows:
    """What the store holds of one side: its run and window, its figures per (family,
    revision) (compare_side.sql) and its traffic's shape (compare_traffic.sql)."""

    name: str
    run_id: int
    window: Window | None
    groups: dict[tuple[str, str], dict]
    traffic: dict


def assemble(
    base: SideRows,
    cur: SideRows,
    ttft: tuple[dict[str, TtftFit | None], str, str],
    fit_run: int,
    notes: tuple[str, ...] = (),
    warnings: tuple[str, ...] = (),
    plan: str = "hpa plan",
    pool=None,
    model: str | None = None,
) -> Comparison:
    """The comparison of two sides' rows: `ttft` is (fits per revision, their source, a
    note), fitted on run `fit_run`; `plan`: the `hpa plan` command (but its target) the
    eviction lever prints (`plan_command`), `pool(target)` its answer in words (None: not
    run).

    Raises:
        ConfigError: a side holds no requests.
    """
    fits, source, note = ttft
    others = other_model_revisions(list(fits), model) if source == "trace ttft_ms" else ()
    usable = {rev: fit if _usable(fit) and rev not in others else None for rev, fit in fits.items()}
    why = None
    if others:
        which = "" if len(others) == len(fits) else f" of {', '.join(others)}"
        why = (
            f"the trace's TTFT{which} was observed on another model than the replay's "
            f"{model}; a concurrent replay simulates it"
        )
    sides = {}
    for rows in (base, cur):
        requests = sum(r["requests"] for r in rows.groups.values())
        if requests == 0:  # two runs of an empty trace cannot happen; windows are checked
            raise ConfigError(f"the {rows.name} holds no requests")
        sides[rows.name] = Side(rows.name, rows.run_id, rows.window, requests)
    traffic = _traffic_table(base.traffic, cur.traffic)
    changes = {r["measure"]: r["change_percent"] for r in traffic.to_pylist()}
    groups, causes, sentence = build_tables(
        base.groups, cur.groups, usable, changes, plan, pool, why
    )
    host = {rows.name: host_tier_figures(rows.groups) for rows in (base, cur)}
    tiered = any(
        h[k]
        for h in host.values()
        for k in ("host_hit_tokens", "host_waited_requests", *HOST_NOT_GIVEN_BACK)
    )
    return Comparison(
        host_tier=host if tiered else None,
        baseline=sides[base.name],
        current=sides[cur.name],
        groups=groups,
        causes=causes,
        traffic=traffic,
        fit_run=fit_run,
        fits=fits,
        ttft_source=source,
        ttft_note=note,
        sentence=sentence,
        notes=notes,
        warnings=warnings,
        other_models=others,
        model=model,
    )


# What a host KV tier did not give back beyond its hits (docs/definitions.md#the-host-kv-tier):
# tokens it had stored then evicted, tokens it never stored (and those by kind).
HOST_NOT_GIVEN_BACK = (
    "host_evicted_tokens",
    "host_never_stored_tokens",
    *(k.column for k in NEVER_STORED),
)


def host_tier_figures(groups: dict[tuple[str, str], dict]) -> dict:
    """A side's host KV tier in all: host hit tokens and their share of the prompt tokens,
    the requests that waited for a load and their mean wait (None: none waited), and what it
    did not give back beyond its hits (HOST_NOT_GIVEN_BACK)."""
    prompt = sum(r["prompt_tokens"] for r in groups.values())
    hits = sum(r.get("host_hit_tokens", 0) for r in groups.values())
    waited = sum(r.get("host_waited_requests", 0) for r in groups.values())
    wait_s = sum(r.get("host_wait_s_sum", 0.0) for r in groups.values())
    return {
        "host_hit_tokens": int(hits),
        "host_hit_ratio": hits / prompt if prompt else 0.0,
        "host_waited_requests": int(waited),
        "host_wait_mean_s": wait_s / waited if waited else None,
        **{k: int(sum(r.get(k, 0) for r in groups.values())) for k in HOST_NOT_GIVEN_BACK},
    }


def fitted_ttft(points: list[tuple], model: str | None, revisions: list[str]):
    """(fits per model revision, their source, a note): from the trace's (revision,
    fresh prefill tokens, ttft_ms) `points`, else the prefill cost of `model`'s preset
    (the same for every one of `revisions`), else none."""
    if points:
        revs, fresh, ttft = zip(*points, strict=True)
        return (
            fit_by_revision(revs, fresh, ttft),
            "trace ttft_ms",
            "fitted from the trace's ttft_ms",
        )
    cost = load_model(model).get("prefill_cost") if model else None
    if cost:
        fit = TtftFit(float(cost["a_ms"]), float(cost["b_ms_per_token"]), math.nan, 0)
        return {r: fit for r in revisions}, "model preset", f"prefill cost of model preset {model}"
    why = f"model preset {model} has no prefill cost" if model else "the run names no model preset"
    return {}, "unavailable", f"TTFT change unavailable: the trace has no ttft_ms and {why}"
