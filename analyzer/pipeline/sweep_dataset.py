"""Sweeps and plans over a Parquet dataset on a non-local executor: the driver holds none
of the trace's token ids.

    outcomes = dataset_sweeps(con, fingerprint, "/data/trace", spec, base, parsed, grid, None)

Every task's worker reads the whole trace from the dataset itself, once per task
(`access.trace.dataset_trace`), and replays whole configurations in its own process:
one sweep point (a replay); a whole `num_blocks` sweep of an LRU full-attention-only
policy from one stack-distance pass, as the store's path computes it on its driver
(`num_blocks=auto` chooses its capacities from that same curve, in the same worker); or
one plan setting's search (plan.py). The driver fits every policy to the trace's blocks
first, as the store path does (`access.geometry.fit_policy`, from the dataset's one
`block_size` column: a 544-token preset replays 1,024-token blocks on a 512-token trace,
with the same note), and stores the rows in the store path's order, so the tables are the
store path's; only `replay_runs.trace_fingerprint` says where the trace came from
(`dataset:` + the files' names and sizes, as `hpa replay --dataset`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from analyzer.access.geometry import fit_policy
from analyzer.access.trace import dataset_trace
from analyzer.access.workers import map_partitions
from analyzer.config.policy import Policy
from analyzer.executors import ExecutorSpec
from analyzer.pipeline.one_pass import OnePass, auto_capacities, one_pass_points, uses_one_pass
from analyzer.pipeline.sweep_points import (
    SweepOutcome,
    fitted_sweeps,
    point_table,
    rows_from_table,
    rows_table,
    store_sweep,
)
from analyzer.sim.dispatch import make_policy
from analyzer.store.caveats import block_size_caveat
from analyzer.store.db import stored_trace_block
from analyzer.store.sequences import check_requests


@dataclass(frozen=True)
class CurveSweep:
    """A num_blocks sweep given by one stack-distance pass: its points' policies, or None
    (`num_blocks=auto`: the capacities chosen from the curve of the fitted base `policy`,
    the points made from the base policy values and fitted to `trace_block`)."""

    base: dict[str, Any]
    policies: tuple[Policy, ...] | None = None
    policy: Policy | None = None
    trace_block: int | None = None


def run_task(dataset: str, task: Policy | CurveSweep):
    """Worker: the trace read once, then one point -> (rows table, seconds), or a one-pass
    sweep -> (its num_blocks values, [(rows table, seconds, from the curve), ...])."""
    trace = dataset_trace(dataset, whole=True)
    if isinstance(task, Policy):
        return point_table(trace, task)
    one = OnePass()
    if task.policies is None:
        values = auto_capacities(trace, task.policy, one)
        ((_, points, _),) = _auto_points(task.base, values, task.trace_block)
        policies = [p for _, p in points]
    else:
        values, policies = [p.num_blocks for p in task.policies], list(task.policies)
    computed = one_pass_points(trace, policies, one)
    return values, [(rows_table(rows), seconds, exact) for rows, seconds, exact in computed]


def run_tasks(
    spec: ExecutorSpec, dataset: str, tasks: list, labels: list[str], progress=None
) -> list:
    """Every task on `spec`, each in a worker process (`local`: in this one)."""
    return map_partitions(
        spec, run_task, tasks, labels=labels, shared=dataset, progress=progress, in_worker=True
    )


def _auto_points(base: dict[str, Any], values: list[int], trace_block: int | None) -> list:
    """An auto sweep, [(knob, [(label, policy) per capacity], notes)], fitted to the
    trace's blocks as the store path fits them."""
    return fitted_sweeps(base, [("num_blocks", values)], False, trace_block)


def dataset_sweeps(
    con,
    fingerprint: str,
    dataset: str,
    spec: ExecutorSpec,
    base: dict[str, Any],
    parsed: list[tuple[str, list]],
    grid: bool,
    progress: Callable[[int, int], None] | None,
    measure_from: float = 0.0,
    name: str | None = None,
) -> list[SweepOutcome]:
    """`run_sweeps` for a dataset on a non-local executor. Every known point is made and
    fitted to the trace's blocks first (the base policy too: the auto sweeps' curves are
    its); the auto sweeps' tasks run first (their curves fix the number of points), then
    every other task at once; nothing is stored until all are back, then each sweep in
    order (sweep and run ids, policies and notes as the store path's)."""
    check_requests(con)  # the driver's check, as `hpa replay --dataset` does
    trace_block = stored_trace_block(con)  # from one column, as the store path reads it
    base_policy, base_note = fit_policy(make_policy(base), trace_block)
    auto = [False] if grid else [vals == ["auto"] for _, vals in parsed]
    known = [(key, [] if vals == ["auto"] else vals) for key, vals in parsed]
    planned = fitted_sweeps(base, known, grid, trace_block)
    computed: list = [None] * len(planned)
    curve = CurveSweep(base, policy=base_policy, trace_block=trace_block)
    _run_auto(spec, dataset, curve, [i for i, a in enumerate(auto) if a], planned, computed)
    knobs, sweeps = [knob for knob, _, _ in planned], [points for _, points, _ in planned]
    _run_rest(spec, dataset, knobs, sweeps, computed, progress)
    mixed = block_size_caveat(con)
    outcomes = []
    for (knob, points, fitted), results in zip(planned, computed, strict=True):
        started = time.perf_counter()
        outcome = store_sweep(
            con, base_policy, knob, points, results, fingerprint, measure_from, name
        )
        outcome.seconds = sum(s for _, s, _ in results) + time.perf_counter() - started
        outcome.notes = tuple(dict.fromkeys(n for n in (mixed, base_note, *fitted) if n))
        outcomes.append(outcome)
    return outcomes


def _run_auto(spec, dataset, curve: CurveSweep, chosen: list[int], planned, computed) -> None:
    """The `num_blocks=auto` sweeps, one task each: fills in their points and results."""
    if not chosen:
        return
    labels = ["sweep num_blocks=auto: one stack-distance pass" for _ in chosen]
    tasks = [curve for _ in chosen]
    for i, (values, results) in zip(chosen, run_tasks(spec, dataset, tasks, labels), strict=True):
        (planned[i],) = _auto_points(curve.base, values, curve.trace_block)
        computed[i] = [(rows_from_table(t), s, exact) for t, s, exact in results]


def _run_rest(spec, dataset, knobs, sweeps, computed, progress) -> None:
    """Every other sweep: a one-pass num_blocks sweep is one task, else one per point."""
    tasks, labels, owners = [], [], []
    for i, (knob, points) in enumerate(zip(knobs, sweeps, strict=True)):
        if computed[i] is not None:
            continue
        policies = tuple(p for _, p in points)
        if uses_one_pass(knob, list(policies)):
            tasks.append(CurveSweep({}, policies))
            labels.append(f"sweep {knob}: one stack-distance pass ({len(points)} points)")
            owners.append((i, None))
            continue
        for k, (label, policy) in enumerate(points):
            tasks.append(policy)
            labels.append(f"sweep point {knob}={label}")
            owners.append((i, k))
    total = sum(len(points) for points in sweeps)
    ready = total - sum(len(sweeps[i]) for i in {i for i, _ in owners})
    if progress and ready:
        progress(ready, total)

    def tick(done: int, count: int) -> None:  # points, in proportion to the tasks back
        if progress:
            progress(ready + (total - ready) * done // count, total)

    for i, _ in owners:
        computed[i] = [None] * len(sweeps[i])
    for (i, k), result in zip(owners, run_tasks(spec, dataset, tasks, labels, tick), strict=True):
        if k is None:
            computed[i] = [(rows_from_table(t), s, exact) for t, s, exact in result[1]]
        else:
            table, seconds = result
            computed[i][k] = (rows_from_table(table), seconds, False)
