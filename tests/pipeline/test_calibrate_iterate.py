"""`hpa calibrate`'s least-squares iteration (`calibrate_search.iterate`) on schedules made
to order: each point's TTFT terms are a table chosen by which side of a step_base_ms boundary
it lies, so the plain iteration (replay at the least squares of the last schedule) cycles
between the two sides. The iteration keeps a step only where it lowers the error, halves the
others, never asks a point twice, stops at a fixed point, when its step has shrunk or after
MAX_STEPS, and answers the lowest error it found."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.pipeline import calibrate_search as search
from analyzer.pipeline.calibrate import _quality
from analyzer.sim.dispatch import make_policy

OBSERVED_MS = np.array([60.0, 100.0])
TOKENS = [1_000, 2_000]
# Below the boundary each request waits 1 step, at or above it 3: the least squares of the
# first (12 ms + 40 us x 1,000 = 60 ms...) is 20 ms, 40 us, above; of the second 6.67 ms,
# 40 us, below: the plain iteration goes back and forth between them
ONE_STEP = np.array([[0.0, 1, TOKENS[0]], [0.0, 1, TOKENS[1]]])
THREE_STEPS = np.array([[0.0, 3, TOKENS[0]], [0.0, 3, TOKENS[1]]])


class _Schedules:
    """A scorer (as `calibrate._Scorer`): a point's terms are `below` under `boundary_ms`
    of step_base_ms, else `above`; with `cut`, a point asked with an error to beat that it
    does not beat answers None, as a replay cut short does (else its evaluation, as the
    plain search's replay to its end). Records every point asked and its error."""

    def __init__(self, boundary_ms: float, below: np.ndarray, above: np.ndarray, cut: bool) -> None:
        self.boundary_ms, self.below, self.above, self.cut = boundary_ms, below, above, cut
        self.observed_ms = OBSERVED_MS
        self.asked: dict[tuple[float, float], float] = {}

    def __call__(self, x: np.ndarray, above: float | None = None):
        e = self.evaluate(search.point_key(x))
        assert e[0].policy.step_base_ms not in [k[0] for k in self.asked]  # never twice
        self.asked[search.point_key(x)] = e[0].sse_ms2
        return None if self.cut and above is not None and e[0].sse_ms2 >= above else e

    def evaluate(self, key: tuple[float, float]):
        base_ms, token_us = key
        policy = make_policy(
            {"block_size": 16, "schedule": "concurrent"}
            | {"step_base_ms": base_ms, "step_token_us": token_us}
        )
        terms = self.below if base_ms < self.boundary_ms else self.above
        return _quality(policy, terms, OBSERVED_MS), terms


def _iterate(scores: _Schedules, start: tuple[float, float]):
    e = scores.evaluate(start)
    return e, search.iterate(scores, e, {start})


CUT = pytest.mark.parametrize("cut", [True, False], ids=["cut short", "replayed in full"])


@CUT
def test_a_cycle_is_broken_by_halving_the_steps_and_the_best_point_kept(cut):
    """The plain iteration from 5 ms would cycle (20 ms above, 6.67 ms below); the halved
    steps stay below the boundary and close in on it, each lowering the error, until
    MAX_STEPS points have been asked."""
    scores = _Schedules(20.0, ONE_STEP, THREE_STEPS, cut)
    start, answer = _iterate(scores, (5.0, 40.0))
    assert list(scores.asked)[:3] == [(20.0, 40.0), (12.5, 40.0), (16.25, 40.0)]
    assert scores.asked[(20.0, 40.0)] == pytest.approx(40.0**2 + 40.0**2)  # 3 steps of 20 ms
    assert len(scores.asked) <= search.MAX_STEPS
    best = min(scores.asked, key=scores.asked.get)
    assert search.point_key(search._at(answer)) == best
    assert answer[0].sse_ms2 == min(scores.asked.values()) < start[0].sse_ms2
    assert 19.9 < answer[0].policy.step_base_ms < 20.0


@CUT
def test_a_fixed_point_stops_the_iteration(cut):
    """One schedule everywhere: the first step lands on its least squares (12 ms, 40 us:
    no error), whose own least squares is itself; nothing more is asked."""
    scores = _Schedules(1e9, np.array([[0.0, 1, 1_000], [0.0, 2, 1_000]]), THREE_STEPS, cut)
    start, answer = _iterate(scores, (5.0, 100.0))
    assert list(scores.asked) == [(40.0, 20.0)]  # 40 + 20, 80 + 20 ms
    assert answer[0].sse_ms2 == pytest.approx(0.0, abs=1e-18)


@CUT
def test_a_step_that_never_lowers_the_error_is_halved_until_it_has_shrunk(cut):
    """From 19.9 ms, just below the boundary, every step towards the least squares of its
    schedule (40 ms, 40 us) crosses the boundary, where each request waits a second more:
    the step halves to 1/16 without lowering the error and the iteration stops, answering
    the start."""
    below = np.array([[0.0, 1, 500], [0.0, 1, 1_500]])  # least squares 40 ms, 40 us
    scores = _Schedules(19.95, below, THREE_STEPS + [1.0, 0, 0], cut)
    start, answer = _iterate(scores, (19.9, 30.0))
    assert search.least_squares(below, OBSERVED_MS) == (40.0, 40.0)
    steps = [(19.9 + a * 20.1, 30.0 + a * 10.0) for a in (1.0, 0.5, 0.25, 0.125, 0.0625)]
    assert list(scores.asked) == [search.point_key(np.log(s)) for s in steps]
    assert all(v > start[0].sse_ms2 for v in scores.asked.values())
    assert answer is start
