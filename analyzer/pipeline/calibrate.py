"""`hpa calibrate`: fit the concurrent schedule's step-time model to a trace's observed TTFT.

With a GPU named (the roofline step), the roofline's efficiency factors: see
`calibrate_roofline`. Without one, the linear step: a step lasts step_base_ms/1e3 +
step_token_us/1e6 x (tokens it schedules) seconds. For a fixed schedule every request's
simulated TTFT is linear in the two parameters:

    ttft = lead + step_base x steps + step_token x tokens

(`ConcurrentReplay.ttft_terms`: the steps between its arrival and its first token, the tokens
they scheduled, and what was left of the step it arrived in; with a host KV tier, what the
engine waited beyond its steps for a load to land joins that lead, `_with_waits`). Each
replica is replayed as `hpa replay` replays it (`concurrent_replay`: with its host tier where
the policy has one). But the schedule moves with the clock, so the error is not smooth in
the parameters: `calibrate_search` searches them (a grid, the fixed-point iteration of the
least squares on each point's schedule from its best points, and simplex searches where that
does not settle), each point a replay scored by the squared error against the observed
`ttft_ms`; the parameters whose own replay matches the observations best are kept.
Quality: R^2 of simulated vs observed TTFT and the absolute errors, over the requests with
an observed TTFT.

Not every point needs its whole replay (`_Scorer`): a point already scored (the parameters
rounded as the policy takes them) is not replayed again; a replay stops once every request
with an observed TTFT has its first token (its terms are fixed then: the decodes after it
change none); and a replay whose answer is only "not below the error to beat" (a simplex
trial against its worst point, an iteration's step against its current point, a grid point
against the grid's sixth best) stops at the first token that puts the squared errors so far
at or above that error (`_Watch`): they only add up, so no later request can bring the sum
back. The points, their errors and the fit are the plain search's
(tests/pipeline/test_calibrate_bound.py).
"""

from __future__ import annotations

import json
import math
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from analyzer.access.geometry import fit_policy
from analyzer.access.trace import LoadedTrace, load_trace
from analyzer.config.policy import Policy, policy_values
from analyzer.errors import ConfigError
from analyzer.pipeline.calibrate_roofline import RooflineCalibration, fit_roofline
from analyzer.pipeline.calibrate_search import point_key, search_linear
from analyzer.pipeline.replay import num_groups, routed_partitions
from analyzer.sim.dispatch import make_policy
from analyzer.sim.vllm import concurrent_replay
from analyzer.sim.watch import stop_when_late
from analyzer.store.db import DEFAULT_DB, connect, load_sql, query_arrow, trace_block_tokens
from analyzer.store.export import check_out_folder, write_atomic

WAIT_EPS_S = 1e-9  # a host tier's wait below this is the clock's rounding (`_with_waits`)


@dataclass(frozen=True)
class Calibration:
    policy: Policy  # the input policy, concurrent, with the fitted step_base_ms/step_token_us
    num_requests: int  # requests with an observed TTFT and a first token
    replays: int  # points the search scored (each a replay, unless `_Scorer` spared it)
    r2: float
    median_abs_error_ms: float
    p90_abs_error_ms: float
    mean_observed_ms: float
    mean_simulated_ms: float
    sse_ms2: float  # sum of squared errors (ms^2), what the search minimises
    notes: tuple[str, ...] = ()  # what the trace changed of the policy (its block geometry)
    # of `replays`: those replayed (up to every measured first token), and those stopped
    # once they could not win (`_Scorer`); the rest were points scored before
    full_replays: int = 0
    cut_short: int = 0


Evaluation = tuple[Calibration, np.ndarray]  # a policy's quality, and its TTFT terms


def calibrate(
    policy_source: str | None,
    overrides: list[str] = (),
    *,
    db_path: str | Path = DEFAULT_DB,
    out: str | Path | None = None,
    roofline: dict | None = None,
) -> Calibration | RooflineCalibration:
    """Fit the policy's (made concurrent) step time to the stored trace's `ttft_ms`: the linear
    step's step_base_ms and step_token_us, or with a GPU the roofline's efficiency factors
    (`calibrate_roofline.fit_roofline`, which takes `roofline`'s keyword arguments: fit,
    max_requests, max_replays, max_seconds). With `out`, write the fit there as JSON: the
    fitted policy (linear), or the fitted efficiency and its quality (roofline)."""
    if out is not None:
        check_out_folder(out)  # before the fit, which may take minutes
    values = {**policy_values(policy_source, list(overrides)), "schedule": "concurrent"}
    policy = make_policy(values)  # a bad policy fails before the trace is read
    roofline = dict(roofline or {})
    only_roofline = sorted(k for k in roofline if k != "max_requests")
    if policy.step_time == "linear" and only_roofline:
        raise ConfigError(
            f"{', '.join('--' + k.replace('_', '-') for k in only_roofline)}: the roofline's "
            "fit only; name a GPU (--gpu) to fit the roofline's efficiency factors"
        )
    trace, observed_ms = _load(db_path)
    fitted, note = fit_policy(policy, trace_block_tokens(trace.columns["block_size"]))
    notes = (note,) if note else ()
    if fitted.step_time != "linear":
        result = fit_roofline(trace, fitted, observed_ms, notes=notes, **roofline)
        if out is not None:
            write_atomic(out, json.dumps(result.as_dict(), indent=2) + "\n", option="--out")
        return result
    limit = roofline.get("max_requests")
    if limit is not None and limit < trace.n:
        kept = _before_the_cut(trace, observed_ms, limit, fitted.time_scale)
        if not np.isfinite(kept).any():
            raise ConfigError(
                f"none of the first {limit:,} requests had its first token (ttft_ms) before "
                "the next request arrived (--max-requests); calibrate fits the step time to "
                "observed TTFT: give more requests"
            )
        notes += (
            f"fitted on the first {limit:,} of {trace.n:,} requests (--max-requests), over "
            f"the {int(np.isfinite(kept).sum()):,} of them with a ttft_ms whose first token "
            "came before the next request arrived",
        )
        trace, observed_ms = trace.take(list(range(limit))), kept
    result = replace(_fit_linear(trace, fitted, observed_ms), notes=notes)
    if out is not None:
        _write(out, result.policy)
    return result


def _before_the_cut(
    trace: LoadedTrace, observed_ms: np.ndarray, limit: int, time_scale: float
) -> np.ndarray:
    """The first `limit` requests' observed TTFTs, NaN where the first token came after
    request `limit` (the first one left out) arrived, on the replay's clock (arrivals
    `time_scale` apart): a replay of the first `limit` cannot see what the later requests
    did to the steps until then (they share the steps' token budget)."""
    stamps = trace.columns["timestamp_s"]
    kept = observed_ms[:limit].copy()
    if any(t is None for t in stamps[: limit + 1]):
        return np.full(limit, np.nan)  # (a concurrent replay refuses such a trace anyway)
    cut_s = stamps[limit] * time_scale
    for i in range(limit):
        if not stamps[i] * time_scale + kept[i] / 1e3 <= cut_s:  # NaN stays NaN
            kept[i] = np.nan
    return kept


def _fit_linear(trace: LoadedTrace, policy: Policy, observed_ms: np.ndarray) -> Calibration:
    """step_base_ms and step_token_us, by `calibrate_search.search_linear` over the replays."""
    score = _Scorer(trace, policy, observed_ms)
    best = search_linear(score)
    return replace(
        best[0], replays=score.points, full_replays=score.full, cut_short=score.cut_short
    )


class _Scorer:
    """Scores a point (log step_base_ms, log step_token_us) by its replay: its Evaluation,
    or None when given `above` and its error is sure to be at least that (the replay stops
    once it is). A point scored in full before is not replayed again; `points` counts every
    point asked, as the search without this would replay each."""

    spare = True  # tests: False replays every point to its end (the plain search)

    def __init__(self, trace: LoadedTrace, policy: Policy, observed_ms: np.ndarray) -> None:
        self.trace, self.observed_ms = trace, observed_ms
        self.values = json.loads(policy.to_json())
        self.scored: dict[tuple[float, float], Evaluation] = {}
        self.at_least: dict[tuple[float, float], float] = {}  # errors known to be >= this
        self.points = self.full = self.cut_short = 0

    def __call__(self, x: np.ndarray, above: float | None = None) -> Evaluation | None:
        self.points += 1
        key = point_key(x)
        if not self.spare:
            above = None
        elif key in self.scored:
            return self.scored[key]
        if above is not None and self.at_least.get(key, -math.inf) >= above:
            return None
        base_ms, token_us = key
        policy = make_policy({**self.values, "step_base_ms": base_ms, "step_token_us": token_us})
        watch = _Watch(policy, self.observed_ms, above) if self.spare else None
        try:
            e = _evaluate(self.trace, policy, self.observed_ms, watch)
        except _Reached:
            self.cut_short += 1
            self.at_least[key] = max(above, self.at_least.get(key, -math.inf))
            return None
        self.full += 1
        if self.spare:
            self.scored[key] = e
        return e


def _evaluate(
    trace: LoadedTrace, policy: Policy, observed_ms: np.ndarray, watch: _Watch | None = None
) -> Evaluation:
    """One concurrent replay of `policy`: its quality and its TTFT terms. With `watch`, each
    replay stops once its measured requests have their first token (the terms of the others
    may then stay NaN), and with the watch's limit `_Reached` is raised once the squared
    error is sure to reach it."""
    terms = _terms(trace, policy, watch)
    return _quality(policy, terms, observed_ms), terms


def _load(db_path) -> tuple[LoadedTrace, np.ndarray]:
    con = connect(db_path, create=False, reader=True)
    try:
        trace = load_trace(con)
        table = query_arrow(con, load_sql("calibrate_observed"))
    finally:
        con.close()
    observed = np.asarray(
        [np.nan if v is None else float(v) for v in table.column("ttft_ms").to_pylist()]
    )
    if not np.isfinite(observed).any():
        raise ConfigError(
            "the trace has no ttft_ms: calibrate fits the step time model to observed TTFT; "
            "ingest records that carry ttft_ms"
        )
    return trace, observed


def _terms(trace: LoadedTrace, policy: Policy, watch: _Watch | None = None) -> np.ndarray:
    """(lead_s, steps, tokens) per request in arrival order; NaN rows for no first token.
    Each replica's replay is the one `hpa replay` runs (`concurrent_replay`: with the host
    tier where the policy has one); `watch` watches its first tokens (`_evaluate`)."""
    ns, _, partitions = routed_partitions(trace, policy)
    members: dict[tuple, list[int]] = {}
    for i, key in enumerate(partitions):
        members.setdefault(key, []).append(i)
    out = np.full((trace.n, 3), np.nan)
    groups = num_groups(policy)
    for indices in members.values():
        requests = [trace.sim_request(i, ns[i]) for i in indices]
        watching = nullcontext() if watch is None else stop_when_late(watch.on(requests, indices))
        with watching:
            replay = concurrent_replay(policy, num_groups=groups)
            if watch is not None:
                watch.replay = replay
            try:
                results = list(replay.run(requests))
            except _AllIn:  # what is left of the replay changes no measured request's terms
                results = replay.flights  # (their first_token_s and arrival_s, as results')
        terms = replay.ttft_terms()
        if replay.host_tier_modelled:
            terms = _with_waits(policy, terms, results)
        for i, term in zip(indices, terms, strict=True):
            if term is not None:
                out[i] = term
    return out


def _with_waits(policy: Policy, terms: list, results: list) -> list:
    """A host tier's terms: its loads add steps (counted) and, where the engine had nothing
    else to run, steps that last until a load lands: that wait is no step's base or tokens,
    so it joins the lead (what the replayed TTFT has beyond the linear terms at this
    schedule's time model)."""
    base_s, token_s = policy.step_base_ms / 1e3, policy.step_token_us / 1e6
    out = []
    for term, r in zip(terms, results, strict=True):
        if term is None or r.first_token_s is None:
            out.append(term)
            continue
        lead_s, steps, tokens = term
        wait_s = r.first_token_s - r.arrival_s - (lead_s + base_s * steps + token_s * tokens)
        # below a nanosecond: the clock's rounding, not a wait
        out.append((lead_s + (wait_s if wait_s > WAIT_EPS_S else 0.0), steps, tokens))
    return out


class _Reached(Exception):
    """A watched replay's squared error has reached the watch's limit (`_Watch`)."""


class _AllIn(Exception):
    """Every measured request of a watched replay has had its first token (`_Watch`)."""


class _Watch:
    """A watch on a replay's first tokens (`sim.watch`'s hook). A request's terms are fixed
    at its first token (when it was queued, the steps and tokens until then), so once every
    request with an observed TTFT (measured) has had it, the rest of the replay (decodes,
    requests without one) changes no figure of the fit: `_AllIn` stops it. With `limit_ms2`,
    `_Reached` stops it once the squared errors of the measured first tokens so far reach the
    limit. Each is the one `_quality` will compute (the terms `ttft_terms` and `_with_waits`
    will give it, the same float operations); they are all >= 0, so their sum only grows.
    The sum is taken in another order than numpy's: it stops only above the limit by more
    than the two sums' rounding can differ (n x 2^-52 each, relative)."""

    def __init__(
        self, policy: Policy, observed_ms: np.ndarray, limit_ms2: float | None = None
    ) -> None:
        self.base_s, self.token_s = policy.step_base_ms / 1e3, policy.step_token_us / 1e6
        self.observed_ms = observed_ms
        self.limit_ms2 = limit_ms2
        self.margin = 1.0 - 4.0 * len(observed_ms) * 2.0**-52
        self.sum_ms2 = 0.0
        self.replay = None  # the replay being watched (set as it is made)
        # request id -> (its flight's place in the watched replay, its trace row)
        self.position: dict[str, tuple[int, int]] = {}
        self.pending = 0  # measured requests of the watched replay with no first token yet

    def on(self, requests: list, indices: list[int]) -> _Watch | None:
        """Itself, to watch the replay of `requests` (trace rows `indices`); None where their
        ids do not tell them apart (that replay runs to its end)."""
        self.position = {
            r.request_id: (k, i) for k, (r, i) in enumerate(zip(requests, indices, strict=True))
        }
        self.pending = int(np.isfinite(self.observed_ms[indices]).sum())
        return self if len(self.position) == len(indices) else None

    def first_token(self, request_id: str, ttft_s: float) -> None:
        k, i = self.position[request_id]
        observed = self.observed_ms[i]
        if not math.isfinite(observed):
            return
        self.pending -= 1
        f = self.replay.flights[k]  # the flights are made in the order of the requests
        lead_s = f.added[2] - f.arrival_s
        steps, tokens = f.to_first
        if self.replay.host_tier_modelled:  # as `_with_waits`
            wait_s = (
                f.first_token_s
                - f.arrival_s
                - (lead_s + self.base_s * steps + self.token_s * tokens)
            )
            lead_s = lead_s + (wait_s if wait_s > WAIT_EPS_S else 0.0)
        simulated = (lead_s + self.base_s * steps + self.token_s * tokens) * 1e3
        error = observed - simulated
        self.sum_ms2 += error * error
        if self.limit_ms2 is not None and self.sum_ms2 * self.margin >= self.limit_ms2:
            raise _Reached
        if self.pending == 0:
            raise _AllIn


def _quality(policy: Policy, terms: np.ndarray, observed_ms: np.ndarray) -> Calibration:
    ok = np.isfinite(observed_ms) & np.isfinite(terms[:, 0])
    base_s, token_s = policy.step_base_ms / 1e3, policy.step_token_us / 1e6
    simulated = (terms[ok, 0] + base_s * terms[ok, 1] + token_s * terms[ok, 2]) * 1e3
    observed = observed_ms[ok]
    errors = np.abs(simulated - observed)
    total = float(((observed - observed.mean()) ** 2).sum())
    r2 = 1.0 - float(((observed - simulated) ** 2).sum()) / total if total else float("nan")
    return Calibration(
        policy,
        int(ok.sum()),
        0,
        r2,
        float(np.median(errors)),
        float(np.quantile(errors, 0.9)),
        float(observed.mean()),
        float(simulated.mean()),
        float(((observed - simulated) ** 2).sum()),
    )


def _write(out: str | Path, policy: Policy) -> None:
    """The fitted policy as a policy file (its canonical JSON), written atomically."""
    write_atomic(out, policy.to_json() + "\n", option="--out")
