"""`hpa calibrate --gpu`: fit the roofline's efficiency factors to a trace's observed TTFT.

With a GPU named, a step's time is the roofline's (`analyzer.config.step_time.RooflineStep`):
each part of the forward pass at a fraction of the GPU's peak FLOPs (the `mfu_*` fields of
`Efficiency`) or of its memory bandwidth (`*bandwidth`), plus fixed times (`*_us`). A TTFT
cannot tell one kernel's efficiency from another's, so the fit scales groups of fields, each
by one factor, keeping the ratios the defaults have within a group (`GROUPS`):

- `compute`: every MFU (the dense GEMMs, attention, experts, recurrent state); what the
  compute-bound steps (long chunks, busy batches) show;
- `memory`: every bandwidth efficiency (dense weights and activations, KV and state,
  experts); what the memory-bound steps show: short chunks, and the decode steps a request
  waits behind;
- `overhead` (only on request, `fit=`): every fixed time. A step's fixed time is a constant per
  step, as is the time its weights take to stream in, so a TTFT tells the two apart only
  through what varies with the step (the KV read, the experts touched): the search's loss is
  nearly flat along a trade of one for the other, and the memory factor absorbs the overhead.

Kept (`KEPT`): the multipliers FP8 and 4-bit weights put on these fractions (they move with
them), the widths at which a kernel reaches half its MFU, and `interconnect` (an all-reduce
costs a time per token, which a TTFT cannot tell from a GEMM's).

A TTFT is not linear in these (a roofline is a max, and the schedule moves with the step
times: queueing), so the fit replays. Each evaluation is one concurrent replay of the first
`max_requests` requests (arrival order: a prefix keeps the queueing as it was). Its loss
compares log TTFTs, replayed against observed, over the requests with an observed ttft_ms > 0,
averaged within bins of the prompts' new tokens (not hit, as the replay with the defaults has
them: long chunks are compute-bound, short ones memory-bound) (`_binned`): a request's own
TTFT moves by a step's worth when its arrival falls in the next step, which a tiny change of
the factors does; a bin's mean does not. The search starts at the defaults with every step
time scaled by the median observed / simulated TTFT, then runs a Nelder-Mead search over the
factors' logarithms; it stops when the simplex has settled, at `max_replays` replays or after
`max_seconds`, and says which. The defaults and the fit are then each replayed over the whole
trace for the errors before and after.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

import numpy as np

from analyzer.access.trace import LoadedTrace
from analyzer.config.policy import Policy
from analyzer.config.step_models import step_model
from analyzer.config.step_time import Efficiency, RooflineStep
from analyzer.errors import ConfigError
from analyzer.pipeline.replay import num_groups, routed_partitions
from analyzer.sim.vllm import concurrent_replay
from analyzer.words import plural

_NAMES = tuple(f.name for f in fields(Efficiency))
# Kept: the interconnect, the multipliers FP8 and 4-bit weights put on the fractions below
# (`fp8*`, `w4*`: they move with them), and the widths at which a kernel reaches half its
# MFU (`*_half_*`). Fitted, each group by one factor: the MFUs, the bandwidth efficiencies and
# the fixed times.
KEPT = tuple(
    k for k in _NAMES if k == "interconnect" or k.startswith(("fp8", "w4")) or "_half_" in k
)
GROUPS: dict[str, tuple[str, ...]] = {
    "compute": tuple(k for k in _NAMES if k.startswith("mfu_") and k not in KEPT),
    "memory": tuple(k for k in _NAMES if k.endswith("bandwidth") and k not in KEPT),
    "overhead": tuple(k for k in _NAMES if k.endswith("_us") and k not in KEPT),
}
DEFAULT_FIT = ("compute", "memory")
POLICY_KEY = "step_efficiency"  # proposed: the policy key that carries an Efficiency
MAX_REQUESTS = 2000  # the search replays the first this many requests
MAX_REPLAYS = 120
MAX_SECONDS = 600.0
SETTLED = 0.005  # the simplex's size in log units (0.5 %) at which the search stops
BIN_REQUESTS = 30  # requests per bin of the search's loss (`_binned`), at least
MAX_BINS = 12
FLOOR = np.log(1e-3)  # the smallest scale searched


@dataclass(frozen=True)
class Quality:
    """Replayed against observed TTFT, over the requests with an observed ttft_ms > 0."""

    num_requests: int
    rms_log_error: float  # per request: sqrt(mean(log(simulated / observed)^2))
    median_abs_error_pct: float  # median |simulated / observed - 1| x 100
    median_abs_error_ms: float
    p90_abs_error_ms: float
    r2: float
    mean_observed_ms: float
    mean_simulated_ms: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class RooflineCalibration:
    policy: Policy  # the input policy, concurrent, with its gpu and tensor_parallel
    step_model: str  # the roofline, in one line
    fitted: tuple[str, ...]  # the groups fitted (`GROUPS`)
    scales: dict[str, float]  # each fitted group's factor on the defaults
    efficiency: Efficiency  # the fit
    start: Efficiency  # the GPU's defaults, what `before` replays
    before: Quality  # the defaults, over the whole trace
    after: Quality  # the fit, over the whole trace
    replays: int  # concurrent replays in all (the search's, and the two over the whole trace)
    seconds: float
    search_requests: int  # the prefix of the trace the search replayed
    stopped: str  # why the search stopped: settled, replay budget, time limit
    notes: tuple[str, ...] = ()

    def policy_keys(self) -> dict:
        """The policy keys that replay with the fitted factors."""
        return {
            "gpu": self.policy.gpu,
            "tensor_parallel": self.policy.tensor_parallel,
            POLICY_KEY: self.efficiency.as_dict(),
        }

    def as_dict(self) -> dict:
        """What `--out` writes: the fitted factors and how they were found."""
        return {
            POLICY_KEY: self.efficiency.as_dict(),
            "fitted": {name: list(GROUPS[name]) for name in self.fitted},
            "scales": self.scales,
            "step_model": self.step_model,
            "model": self.policy.model,
            "gpu": self.policy.gpu,
            "tensor_parallel": self.policy.tensor_parallel,
            "defaults": self.start.as_dict(),
            "before": self.before.as_dict(),
            "after": self.after.as_dict(),
            "replays": self.replays,
            "seconds": round(self.seconds, 3),
            "search_requests": self.search_requests,
            "stopped": self.stopped,
        }


class RooflineReplayer:
    """Concurrent replays of (a prefix of) a trace with the policy's roofline at given
    efficiency factors: each request's simulated TTFT (ms; NaN: no first token)."""

    def __init__(self, trace: LoadedTrace, policy: Policy) -> None:
        model = step_model(policy)
        if not isinstance(model, RooflineStep):
            raise ConfigError(
                f"calibrate fits the linear step or the roofline, not step_model "
                f"{policy.step_model} (measured tables have no factors to fit)"
            )
        self.trace, self.policy, self.model = trace, policy, model
        self.ns, _, self.partitions = routed_partitions(trace, policy)
        self.groups = num_groups(policy)
        self.replays = 0
        self.new_tokens = np.zeros(0, dtype=np.int64)  # the last replay's, per request

    def ttft_ms(self, efficiency: Efficiency, limit: int | None = None) -> np.ndarray:
        n = self.trace.n if limit is None else min(limit, self.trace.n)
        members: dict[tuple, list[int]] = {}
        for i in range(n):
            members.setdefault(self.partitions[i], []).append(i)
        m = self.model
        priced = RooflineStep(m.figures, m.gpu, m.tensor_parallel, efficiency, name=m.name)
        out = np.full(n, np.nan)
        self.new_tokens = np.zeros(n, dtype=np.int64)
        for indices in members.values():
            replay = concurrent_replay(self.policy, num_groups=self.groups)  # with its host tier
            replay.step_model = priced  # the policy's roofline, at these factors
            results = replay.run(self.trace.sim_request(i, self.ns[i]) for i in indices)
            for i, r in zip(indices, results, strict=True):
                # a host tier's hit is loaded, not computed
                self.new_tokens[i] = r.prompt_tokens - r.hit_tokens - r.host_hit_tokens
                if r.first_token_s is not None:
                    out[i] = (r.first_token_s - r.arrival_s) * 1e3
        self.replays += 1
        return out


def fit_roofline(
    trace: LoadedTrace,
    policy: Policy,
    observed_ms: np.ndarray,
    *,
    fit: tuple[str, ...] = DEFAULT_FIT,
    max_requests: int = MAX_REQUESTS,
    max_replays: int = MAX_REPLAYS,
    max_seconds: float = MAX_SECONDS,
    notes: tuple[str, ...] = (),
) -> RooflineCalibration:
    """Fit the `fit` groups of the policy's roofline to `observed_ms` (arrival order)."""
    began = time.monotonic()
    fit = tuple(name for name in GROUPS if name in fit)  # GROUPS' order, once each
    replayer = RooflineReplayer(trace, policy)
    start = replayer.model.efficiency
    limit = min(max_requests, trace.n)
    observed = np.where(observed_ms > 0, observed_ms, np.nan)
    if np.isfinite(observed[:limit]).sum() < 2 * len(fit):
        raise ConfigError(
            f"calibrate needs at least {2 * len(fit)} requests with an observed TTFT > 0 among "
            f"the first {limit:,} (--max-requests)"
        )
    low, high = np.full(len(fit), FLOOR), _ceiling(start, fit)
    x0 = np.clip(_scaled_start(replayer.ttft_ms(start, limit), observed[:limit], fit), low, high)
    bins = _bins(replayer.new_tokens, observed[:limit], 2 * len(fit))  # hits as the defaults'

    def loss(x: np.ndarray) -> float:
        simulated = replayer.ttft_ms(_efficiency(start, x, fit), limit)
        return _binned(simulated, observed[:limit], bins)

    def spent() -> bool:
        return replayer.replays >= max_replays

    x, stopped = _nelder_mead(loss, x0, (low, high), spent, began + max_seconds)
    stopped = f"replay budget ({plural(max_replays, 'replay')})" if stopped == "budget" else stopped
    fitted = _efficiency(start, x, fit)
    before = _quality(replayer.ttft_ms(start), observed)
    after = _quality(replayer.ttft_ms(fitted), observed)
    scales = {name: round(float(np.exp(v)), 6) for name, v in zip(fit, x, strict=True)}
    capped = [
        k
        for name in fit
        if name != "overhead"
        for k in GROUPS[name]
        if getattr(start, k) * scales[name] > 1.0
    ]
    if capped:
        notes += (
            f"{', '.join(capped)} capped at 1 (the fit asked for more): the trace is faster "
            "than the roofline allows at peak (check --gpu, --tensor-parallel and the model)",
        )
    return RooflineCalibration(
        policy, replayer.model.describe(), fit, scales, fitted, start, before, after,
        replayer.replays, time.monotonic() - began, limit, stopped, notes,
    )  # fmt: skip


def _efficiency(start: Efficiency, x: np.ndarray, fitted: tuple[str, ...]) -> Efficiency:
    """`start` with each fitted group's fields times exp(x) (`fitted`'s order); fractions of
    peak at most 1."""
    values = start.as_dict()
    for name, scale in zip(fitted, np.exp(x), strict=True):
        for key in GROUPS[name]:
            scaled = values[key] * float(scale)
            values[key] = scaled if name == "overhead" else min(scaled, 1.0)
    return Efficiency(**values)


def _scaled_start(simulated: np.ndarray, observed: np.ndarray, fitted: tuple[str, ...]):
    """Every step time scaled by the median observed / simulated TTFT (a first guess that
    ignores queueing), as log-scales of the fitted groups."""
    ok = np.isfinite(simulated) & np.isfinite(observed)
    ratio = float(np.median(observed[ok] / simulated[ok])) if ok.any() else 1.0
    return np.log([ratio if name == "overhead" else 1 / ratio for name in fitted])


def _ceiling(start: Efficiency, fitted: tuple[str, ...]) -> np.ndarray:
    """The largest useful log-scale of each group: every fraction in it at 1."""
    values = start.as_dict()
    return np.array(
        [
            np.inf if name == "overhead" else -np.log(min(values[k] for k in GROUPS[name]))
            for name in fitted
        ]
    )


def _nelder_mead(
    loss: Callable[[np.ndarray], float],
    x0: np.ndarray,
    box: tuple[np.ndarray, np.ndarray],
    spent: Callable[[], bool],
    deadline: float,
) -> tuple[np.ndarray, str]:
    """Minimise `loss` from x0 within `box` (first steps of 0.5 in log units, a factor of
    1.65); the loss is a replay, whose schedule moves with the factors, so it is not smooth.
    (the best x, why it stopped: settled, budget or time limit)."""

    def at(x: np.ndarray) -> tuple[float, np.ndarray]:
        x = np.clip(x, *box)
        return loss(x), x

    dims = len(x0)
    steps = [np.where(x0[k] + 0.5 <= box[1][k], 0.5, -0.5) for k in range(dims)]
    simplex = [at(x0)] + [at(x0 + steps[k] * np.eye(dims)[k]) for k in range(dims)]
    while True:
        simplex.sort(key=lambda e: e[0])
        best_f, best = simplex[0]
        if max(np.abs(x - best).max() for _, x in simplex) < SETTLED:
            return best, "settled"
        if spent():
            return best, "budget"
        if time.monotonic() > deadline:
            return best, "time limit"
        centre = np.mean([x for _, x in simplex[:-1]], axis=0)
        worst_f, worst = simplex[-1]
        fr, reflected = at(2 * centre - worst)
        if fr < best_f:  # try further
            fe, expanded = at(3 * centre - 2 * worst)
            simplex[-1] = (fe, expanded) if fe < fr else (fr, reflected)
        elif fr < simplex[-2][0]:
            simplex[-1] = (fr, reflected)
        else:  # contract (outside when the reflection beat the worst), else shrink
            fc, contracted = at(centre + (0.5 if fr < worst_f else -0.5) * (centre - worst))
            if fc < min(fr, worst_f):
                simplex[-1] = (fc, contracted)
            else:
                simplex = [simplex[0]] + [at((best + x) / 2) for _, x in simplex[1:]]


def _bins(new_tokens: np.ndarray, observed: np.ndarray, least: int) -> np.ndarray:
    """Per request, its bin of the search's loss: the requests with an observed TTFT in
    quantiles of their prompt's new tokens (not hit), `BIN_REQUESTS` or more each, but `least`
    bins at least (-1: no observed TTFT)."""
    ok = np.flatnonzero(np.isfinite(observed))
    count = min(MAX_BINS, max(least, len(ok) // BIN_REQUESTS), len(ok))
    out = np.full(len(observed), -1)
    order = ok[np.argsort(new_tokens[ok], kind="stable")]
    out[order] = np.arange(len(ok)) * count // len(ok)
    return out


def _binned(simulated: np.ndarray, observed: np.ndarray, bins: np.ndarray) -> float:
    """The search's loss: the root mean square over requests of their bin's mean log error.
    A request without a first token counts as an error of 1 (a factor of e)."""
    ok = bins >= 0
    with np.errstate(invalid="ignore", divide="ignore"):
        errors = np.log(simulated[ok] / observed[ok])
    errors[~np.isfinite(errors)] = 1.0
    sums = np.bincount(bins[ok], errors)
    counts = np.bincount(bins[ok])
    return float(np.sqrt((sums**2 / np.maximum(counts, 1)).sum() / ok.sum()))


def _quality(simulated: np.ndarray, observed: np.ndarray) -> Quality:
    ok = np.isfinite(simulated) & np.isfinite(observed)
    sim, obs = simulated[ok], observed[ok]
    errors = np.abs(sim - obs)
    total = float(((obs - obs.mean()) ** 2).sum())
    r2 = 1.0 - float(((obs - sim) ** 2).sum()) / total if total else float("nan")
    logs = np.log(sim / obs)
    return Quality(
        int(ok.sum()),
        float(np.sqrt(np.mean(logs**2))),
        float(np.median(np.abs(sim / obs - 1))) * 100,
        float(np.median(errors)),
        float(np.quantile(errors, 0.9)),
        r2,
        float(obs.mean()),
        float(sim.mean()),
    )
