"""What load does to a setting: latency and queueing figures from a concurrent replay's rows.

A concurrent replay gives every request its times on the simulated clock (`arrival_s`,
`first_scheduled_s`, `first_token_s`, `finished_s`, from the earliest arrival of its
replica's partition) and `queue_s`, `ttft_s`. From them, over the measured requests:

- TTFT p50 and p99 (seconds, linear interpolation between order statistics, as DuckDB's
  `quantile_cont`), the mean queueing time, and the most requests in flight on one replica
  (arrived and not finished: queued or running) at any instant;
- TPOT p50 and p99 (time per output token after the first: (finished - first token) /
  (outputs - 1), over the requests with two outputs or more);
- **goodput**: the requests served within the targets (TTFT and TPOT, those set) per second
  of the replay, from its first arrival to its last finish (a request that was never
  scheduled is not served);
- **saturation**: the simulated server cannot keep up when requests queue longer the later
  they arrive. Saturated = the last quarter of arrivals queued on average more than 1 s and
  more than twice the first quarter did (`store.runs.is_saturated`, which `hpa replay` and
  the report apply to a stored run too). A server that keeps up has a queue that comes and
  goes; one that does not has a queue that grows with the trace (linear growth makes the
  last quarter's mean about 7x the first's).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from analyzer.store.runs import is_saturated


@dataclass(frozen=True)
class LoadFigures:
    """Latency figures of one concurrent replay (seconds, on the simulated clock)."""

    ttft_p50_s: float
    ttft_p99_s: float
    queue_mean_s: float
    max_in_flight: int  # on the busiest replica
    saturated: bool
    queue_first_quarter_s: float  # mean queueing time of the first quarter of arrivals
    queue_last_quarter_s: float
    arrivals_per_s: float  # on the busiest replica: its requests over its arrival span
    tpot_p50_s: float | None = None  # None: no measured request has two outputs
    tpot_p99_s: float | None = None
    goodput_rps: float = 0.0  # requests a second served within the targets
    within_targets: int = 0  # how many requests were

    def as_dict(self) -> dict:
        return asdict(self)


def load_figures(
    rows: dict, mask: np.ndarray | None, outputs: np.ndarray | None = None, targets=None
) -> LoadFigures | None:
    """The figures over the requests `mask` selects (every one when None); None for a serial
    replay (no clock) or when no measured request got a first token. `outputs`: each
    request's output tokens (TPOT; None: not measured); `targets` (`evaluate.Targets`):
    what goodput counts as served within them (None: every request served)."""
    ttft = _seconds(rows["ttft_s"], mask)
    if not np.isfinite(ttft).any():
        return None
    tpot = _tpot(rows, mask, outputs)
    good = _within(ttft, tpot, targets)
    arrival = _seconds(rows["arrival_s"], mask)
    finished = _seconds(rows["finished_s"], mask)
    span = float(np.nanmax(finished) - np.nanmin(arrival)) if np.isfinite(finished).any() else 0.0
    timed = tpot[np.isfinite(tpot)]
    queue = _seconds(rows["queue_s"], mask)
    quarter = max(1, len(queue) // 4)
    first, last = _mean(queue[:quarter]), _mean(queue[-quarter:])
    in_flight, rate = _busiest_replica(rows, mask)
    done = ttft[np.isfinite(ttft)]
    return LoadFigures(
        ttft_p50_s=float(np.quantile(done, 0.5)),
        ttft_p99_s=float(np.quantile(done, 0.99)),
        queue_mean_s=_mean(queue),
        max_in_flight=in_flight,
        saturated=is_saturated(first, last),
        queue_first_quarter_s=first,
        queue_last_quarter_s=last,
        arrivals_per_s=rate,
        tpot_p50_s=float(np.quantile(timed, 0.5)) if len(timed) else None,
        tpot_p99_s=float(np.quantile(timed, 0.99)) if len(timed) else None,
        goodput_rps=good / span if span > 0 else 0.0,
        within_targets=good,
    )


def _tpot(rows: dict, mask: np.ndarray | None, outputs: np.ndarray | None) -> np.ndarray:
    """Per measured request its time per output token after the first (nan with fewer than
    two outputs, or not finished)."""
    finished = _seconds(rows["finished_s"], mask)
    if outputs is None:
        return np.full(len(finished), np.nan)
    first = _seconds(rows["first_token_s"], mask)
    out = np.asarray(outputs if mask is None else outputs[mask], dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(out >= 2, (finished - first) / (out - 1), np.nan)


def _within(ttft: np.ndarray, tpot: np.ndarray, targets) -> int:
    """The requests that got a first token within the TTFT target and decoded within the
    TPOT one (a request with fewer than two outputs has no TPOT to miss)."""
    ok = np.isfinite(ttft)
    if targets is not None and targets.ttft_p99_s is not None:
        ok &= ttft <= targets.ttft_p99_s
    if targets is not None and targets.tpot_p99_s is not None:
        ok &= ~(tpot > targets.tpot_p99_s)
    return int(ok.sum())


def _seconds(values: list, mask: np.ndarray | None) -> np.ndarray:
    """A column of seconds or None, in arrival order, as floats (None -> nan)."""
    out = np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    return out if mask is None else out[mask]


def _mean(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else 0.0


def _busiest_replica(rows: dict, mask: np.ndarray | None) -> tuple[int, float]:
    """(the most requests in flight at once on any replica, the highest arrival rate of any
    replica in requests a second over its arrival span)."""
    arrival = _seconds(rows["arrival_s"], mask)
    finished = _seconds(rows["finished_s"], mask)
    replicas = np.asarray(rows["replica"], dtype=object)
    replicas = replicas if mask is None else replicas[mask]
    most, rate = 0, 0.0
    for replica in sorted(set(replicas.tolist()), key=str):
        mine = (replicas == replica) & np.isfinite(arrival) & np.isfinite(finished)
        most = max(most, max_overlap(arrival[mine], finished[mine]))
        span = float(arrival[mine].max() - arrival[mine].min()) if mine.any() else 0.0
        if span > 0:
            rate = max(rate, int(mine.sum()) / span)
    return most, rate


def max_overlap(starts: np.ndarray, ends: np.ndarray) -> int:
    """The most intervals [start, end) covering one instant (an end before a start at the
    same instant: a request finishing as another arrives is not in flight with it)."""
    if not len(starts):
        return 0
    times = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones(len(starts), np.int64), -np.ones(len(ends), np.int64)])
    order = np.lexsort((steps, times))  # by time, then -1 before +1
    return int(np.cumsum(steps[order]).max())
