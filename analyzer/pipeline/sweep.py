"""`hpa sweep`: move one policy knob at a time (or a grid), one stored replay run per point.

    sweeps = run_sweeps("vllm-default", ["model=qwen3.5-4b"], ["num_blocks=500,1000"], db_path=..)

Every point is a normal run (replay_runs / replay_requests / replay_summary) plus a row of
`sweep_points`. Points are replayed in worker processes (`jobs`) from the trace loaded once,
then stored in value order, so run ids and results do not depend on `jobs`. With a Parquet
dataset and a non-local executor, this process loads none of the trace: every task's worker
reads it from the dataset itself (pipeline/sweep_dataset.py), and the tables are the same.

A `num_blocks` sweep of an LRU full-attention-only policy (see `one_pass_applies`) is not
replayed point by point: one stack-distance pass (sim/vllm/compiled/stack_distance.py,
pipeline/one_pass.py) gives every capacity, and a point where that pass is not provably exact
falls back to its own replay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from analyzer.access.geometry import fit_policy
from analyzer.access.inputs import request_input
from analyzer.access.workers import map_partitions
from analyzer.config.policy import policy_values
from analyzer.errors import ConfigError
from analyzer.executors import ExecutorSpec, as_spec
from analyzer.pipeline.one_pass import (
    OnePass,
    auto_capacities,
    one_pass_applies,
    one_pass_points,
    uses_one_pass,
)
from analyzer.pipeline.sweep_dataset import dataset_sweeps
from analyzer.pipeline.sweep_points import (
    SweepOutcome,
    fitted_sweeps,
    parse_vary,
    point_rows,
    point_table,
    rows_from_table,
    store_sweep,
)
from analyzer.sim.dispatch import make_policy
from analyzer.store.caveats import block_size_caveat
from analyzer.store.db import (
    DEFAULT_DB,
    open_to_store,
    stored_trace_block,
    trace_fingerprint,
)
from analyzer.store.runs import check_measure_from, check_name


def run_sweeps(
    policy_source: str | None,
    overrides: list[str],
    varies: list[str],
    *,
    grid: bool = False,
    jobs: int = 2,
    db_path: str | Path = DEFAULT_DB,
    progress: Callable[[int, int], None] | None = None,
    executor: ExecutorSpec | str | None = None,
    dataset: str | Path | None = None,
    measure_from: float = 0.0,
    name: str | None = None,
) -> list[SweepOutcome]:
    """Replay every point, store runs and sweep tables, return the sweeps in order.

    Points (configurations) are the partitions: they run on `executor` (default
    `processes` with `jobs` workers; a name gets `jobs` as its workers); results are
    stored in value order by this process, so run ids never depend on the executor.
    `progress(done, total)` is called after each point (for a progress bar).
    `dataset`: read the requests from a Parquet dataset (analyzer.store.dataset), the
    runs still stored in `db_path` (created when missing). With a non-local executor each
    task's worker reads the trace from it, once (see pipeline/sweep_dataset.py); with
    `local` this process reads it whole, once. `measure_from` (0 <= f < 1): every point's
    figures count the requests from arrival index floor(f x n) on; all of them replay.
    """
    check_measure_from(measure_from)
    check_name(name)
    parsed, base, base_policy = _checked(policy_source, overrides, varies, grid, jobs)
    spec = as_spec(executor or "processes", workers=jobs)
    source = request_input(db_path, dataset)
    # The store's own trace is read on a read-only connection, let go of before the points
    # replay: `hpa query` reads the store meanwhile; each sweep is stored on a writable one.
    con = source.connect()
    try:
        if source.is_dataset and not spec.is_local:
            return dataset_sweeps(
                con, source.fingerprint, source.dataset, spec, base, parsed, grid, progress,
                measure_from, name,
            )  # fmt: skip
        trace_block = stored_trace_block(con)  # known before the trace loads
        base_policy, base_note = fit_policy(base_policy, trace_block)
        trace, one = source.whole_trace(con), OnePass()
        planned = _planned(trace, one, base, base_policy, parsed, grid, trace_block)
        mixed = block_size_caveat(con)
        read_from = None if source.is_dataset else trace_fingerprint(con)[0]
        if not source.is_dataset:
            con.close()
        counted = _counter(sum(len(points) for _, points, _ in planned), progress)
        outcomes = []
        for knob, points, notes in planned:
            started = time.perf_counter()
            if uses_one_pass(knob, [p for _, p in points]):
                computed = one_pass_points(trace, [p for _, p in points], one, counted)
            else:
                ran = _run_points(trace, points, spec, counted, knob)
                computed = [(r, s, False) for r, s in ran]
            writer = con if source.is_dataset else open_to_store(db_path, read_from)
            try:
                outcome = store_sweep(
                    writer, base_policy, knob, points, computed, source.fingerprint,
                    measure_from, name,
                )  # fmt: skip
            finally:
                if writer is not con:
                    writer.close()
            outcome.seconds = time.perf_counter() - started
            outcome.notes = tuple(dict.fromkeys(n for n in (mixed, base_note, *notes) if n))
            outcomes.append(outcome)
        return outcomes
    finally:
        con.close()


def _checked(policy_source, overrides, varies, grid: bool, jobs: int):
    """(the --vary values parsed, the base policy's values, the base policy), or the
    ConfigError of a sweep that cannot run."""
    if not varies:
        raise ConfigError("give at least one --vary KEY=V1,V2,...")
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: expected an integer >= 1")
    parsed = [parse_vary(v) for v in varies]
    auto = any(vals == ["auto"] for _, vals in parsed)
    if grid and auto:
        raise ConfigError("--vary num_blocks=auto cannot be part of a --grid")
    base = policy_values(policy_source, overrides)
    base_policy = make_policy(base)
    if auto and not one_pass_applies(base_policy):
        raise ConfigError(
            "--vary num_blocks=auto needs an LRU full-attention-only policy "
            "(groups [full_attention], spec_decode none, schedule serial); give explicit "
            "values instead"
        )
    return parsed, base, base_policy


def _planned(trace, one, base, base_policy, parsed, grid: bool, trace_block):
    """[(knob, [(label, policy)], notes)]: every point made and fitted to the trace's blocks
    before anything replays (a bad value is one line, no runs); `auto` capacities found."""
    resolved = [
        (key, auto_capacities(trace, base_policy, one) if vals == ["auto"] else vals)
        for key, vals in parsed
    ]
    return fitted_sweeps(base, resolved, grid, trace_block)


def _counter(total: int, progress: Callable[[int, int], None] | None) -> Callable[[], None]:
    """A tick for each point done, passed on to `progress(done, total)`."""
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress:
            progress(done[0], total)

    return tick


def _run_points(trace, points, spec: ExecutorSpec, tick, knob: str) -> list[tuple[dict, float]]:
    """Every point's (rows, seconds), in value order, run on `spec`."""
    labels = [f"sweep point {knob}={label}" for label, _ in points]
    policies = [p for _, p in points]
    done = [0]

    def progress(n: int, total: int) -> None:
        while done[0] < n:
            done[0] += 1
            tick()

    if spec.is_local:
        return map_partitions(
            spec, point_rows, policies, labels=labels, shared=trace, progress=progress
        )
    parts = map_partitions(
        spec, point_table, policies, labels=labels, shared=trace, progress=progress
    )
    return [(rows_from_table(table), seconds) for table, seconds in parts]
