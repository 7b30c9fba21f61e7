"""`hpa calibrate`'s search for the linear step (`calibrate._fit_linear`): step_base_ms and
step_token_us, each point scored by a replay (`calibrate._Scorer`: the squared error of its
simulated TTFT against the observed `ttft_ms`, with the TTFT terms of its schedule).

For a fixed schedule every request's simulated TTFT is linear in the two parameters, so the
least squares on a replay's terms is the point that schedule fits best; but the schedule
moves with them. The search: a coarse 5 x 5 grid; from each of its six best points the
fixed-point iteration of that least squares (`iterate`: replay at the fit of the current
schedule, keep it where it lowers the error, halve the step where it does not, accelerate
by Anderson's step); and where the best point found is not a fixed point (its own
schedule's least squares is another point: the iteration stalled where the schedule jumps,
as on TTFTs no step time made, or a deep queue's), a simplex search (Nelder-Mead over the
logarithms, `simplex`) from each of the two best, and an iteration from the best they found.
The groups sample's and the host tier's TTFTs, made by a linear step, are found to the policy's
6 decimals in 40-110 replays, where simplex searches from the grid's six best points took
500-580 and stopped up to 0.14% off; docs/commands.md has the figures,
tests/pipeline/test_calibrate_iterate.py the iteration's rules.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from analyzer.errors import ConfigError

# a point's score: (its calibrate.Calibration: the policy and sse_ms2, its TTFT terms)
Evaluation = tuple[Any, np.ndarray]

START_MS = (1.0, 3.0, 10.0, 30.0, 100.0)  # step_base_ms of the starting grid
START_US = (5.0, 15.0, 50.0, 150.0, 500.0)  # step_token_us of the starting grid
# iterations, from the grid's best points: under async scheduling (vLLM's default) the error
# has more local minima than synchronously (simplex searches from 3 stopped at R^2 0.92 on
# the groups sample, from 6 they found it)
STARTS = 6
SETTLED = 1e-3  # the simplex's size in log units (0.1%) at which the search stops
MAX_STEPS = 30  # replays of one least-squares iteration at most (`iterate`)
MEMORY = 2  # earlier kept points an Anderson step combines
SHRUNK = 1 / 16  # a step halved to this without lowering the error ends the iteration
SIMPLEXES = 2  # simplex searches where the best iteration did not settle
FLOOR = 1e-6  # a parameter the least squares puts at 0 is replayed at this


class Scorer(Protocol):
    """`calibrate._Scorer`: a point's Evaluation, or None when given `above` and its error
    is sure to be at least that."""

    observed_ms: np.ndarray

    def __call__(self, x: np.ndarray, above: float | None = None) -> Evaluation | None: ...


def search_linear(score: Scorer) -> Evaluation:
    """The best point found: the grid, the least-squares iteration from each of its best
    points, and where the best one did not settle, simplex searches from the best two."""
    observed_ms = score.observed_ms
    grid: list[Evaluation] = []  # those fully scored, in the grid's order
    for b in START_MS:
        for t in START_US:
            # a point at or above the sixth best so far is not among the best six (the sort
            # is stable: an equal one found earlier stays ahead of it)
            sixth = sorted(e[0].sse_ms2 for e in grid)[STARTS - 1] if len(grid) >= STARTS else None
            e = score(np.log([b, t]), sixth)
            if e is not None:
                grid.append(e)
    grid.sort(key=lambda e: e[0].sse_ms2)
    seen = {point_key(_at(e)) for e in grid[:STARTS]}  # the points the iterations asked
    ends = sorted((iterate(score, e, seen) for e in grid[:STARTS]), key=lambda e: e[0].sse_ms2)
    best = ends[0]
    if point_key(_fitted(best, observed_ms)) != point_key(_at(best)):  # not a fixed point
        searched = [simplex(score, e) for e in ends[:SIMPLEXES]]  # (each a point of its own)
        best = min([best, *searched], key=lambda e: e[0].sse_ms2)
        best = iterate(score, best, seen)  # (a least-squares step off the simplex's best)
    return best


def _at(e: Evaluation) -> np.ndarray:
    """The point (log step_base_ms, log step_token_us) that `e` scored."""
    return np.log([e[0].policy.step_base_ms, e[0].policy.step_token_us])


def point_key(x: np.ndarray) -> tuple[float, float]:
    """A point as the policy takes it (the parameters rounded to 6 decimals)."""
    return tuple(round(float(v), 6) for v in np.exp(x))


def _fitted(e: Evaluation, observed_ms: np.ndarray) -> np.ndarray:
    """The least squares on `e`'s schedule, as a point (a parameter at 0 at FLOOR)."""
    return np.log(np.maximum(least_squares(e[1], observed_ms), FLOOR))


def iterate(score: Scorer, start: Evaluation, seen: set) -> Evaluation:
    """From `start`, the fixed-point iteration of the least squares on each schedule: a
    replay at the parameters that fit the current point's schedule best. The schedule moves
    with them, so a step is kept only if it lowers the error (the trial is replayed against
    the current point's error: `score` stops one that cannot); one that does not is halved
    towards the current point, and the iteration stops once a step has halved to SHRUNK,
    asks a point any iteration asked before (a fixed point: the least squares gives the point
    back; or a cycle), or after MAX_STEPS. After two kept steps, each next one is first tried
    as an Anderson step over the last MEMORY + 1 kept points (the secant of the least squares'
    change with the point: the iteration converges linearly, often halving the distance a
    step). Answers the lowest error found, which is the last kept point's."""
    here, alpha = start, 1.0
    kept: list[tuple[np.ndarray, np.ndarray]] = []  # (point, its schedule's fit), parameters
    moved = True
    for _ in range(MAX_STEPS):
        point = np.array([here[0].policy.step_base_ms, here[0].policy.step_token_us])
        if moved:
            kept.append((point, np.array(least_squares(here[1], score.observed_ms))))
        anderson, moved = moved and len(kept) > 1, False
        if anderson:
            y = _anderson(kept[-1 - MEMORY :])
        else:
            y = point + alpha * (kept[-1][1] - point)
        x = np.log(np.maximum(y, FLOOR))
        if point_key(x) in seen:
            if anderson:
                continue  # (the plain step next)
            break
        seen.add(point_key(x))
        trial = score(x, here[0].sse_ms2)
        if trial is not None and trial[0].sse_ms2 < here[0].sse_ms2:
            here, moved = trial, True
        elif not anderson:
            alpha /= 2
            if alpha < SHRUNK:
                break
    return here


def _anderson(kept: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Anderson's step (type II, no damping) from the last of the `kept` (point, fit) pairs:
    the fit less the combination of the fits' differences whose residuals' differences best
    cancel the last residual (fit - point), clipped at 0."""
    point, fit = kept[-1]
    residual = fit - point
    d_fit = np.array([fit - f for _, f in kept[:-1]]).T
    d_residual = np.array([residual - (f - p) for p, f in kept[:-1]]).T
    gamma, *_ = np.linalg.lstsq(d_residual, residual, rcond=None)
    return np.maximum(fit - d_fit @ gamma, 0.0)


def simplex(evaluate, start: Evaluation, evaluations: int = 60) -> Evaluation:
    """Nelder-Mead over log(step_base_ms), log(step_token_us), from `start`:
    the replay's schedule moves with the parameters, so the error is not smooth in them.
    A trial is only compared with the worst point: `evaluate(x, worst)` may answer None
    (not below it)."""
    x0 = _at(start)
    points = [(start, x0)] + [(evaluate(x), x) for x in (x0 + [0.7, 0], x0 + [0, 0.7])]
    for _ in range(evaluations):
        points.sort(key=lambda e: e[0][0].sse_ms2)
        (_, xb), (_, xm), (worst, xw) = points
        if np.abs(xw - xb).max() < SETTLED:
            break
        centre = (xb + xm) / 2
        for step in (1.0, 2.0, 0.5, -0.5):  # reflect, expand, contract out, contract in
            x = centre + step * (centre - xw)
            trial = evaluate(x, worst[0].sse_ms2)
            if trial is not None and trial[0].sse_ms2 < worst[0].sse_ms2:
                points[2] = (trial, x)
                break
        else:  # shrink towards the best
            halves = [(xb + x) / 2 for _, x in points[1:]]
            points = [points[0]] + [(evaluate(x), x) for x in halves]
    return min(points, key=lambda e: e[0][0].sse_ms2)[0]


def least_squares(terms: np.ndarray, observed_ms: np.ndarray) -> tuple[float, float]:
    """Non-negative least squares of observed - lead on (steps, tokens): (base ms, token us)."""
    ok = np.isfinite(observed_ms) & np.isfinite(terms[:, 0])
    if ok.sum() < 2:
        raise ConfigError("calibrate needs at least 2 requests with an observed TTFT")
    y = observed_ms[ok] / 1e3 - terms[ok, 0]
    x = terms[ok, 1:]
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    if coef[0] < 0 or coef[1] < 0:  # one parameter at 0: the other alone
        k = 1 if coef[0] < 0 else 0
        col = x[:, k]
        best = max(float(col @ y) / float(col @ col), 0.0) if col @ col else 0.0
        coef = np.zeros(2)
        coef[k] = best
    return round(float(coef[0]) * 1e3, 6), round(float(coef[1]) * 1e6, 6)
