"""Commands for capacity planning and reports: sweep, calibrate, report (plan: `plan.py`)."""

from __future__ import annotations

import click

from analyzer.cli.base import (
    baseline_option,
    cli,
    dataset_option,
    db_option,
    executor_options,
    executor_spec,
    heartbeat,
    measure_from_option,
    name_option,
    out_file_option,
    policy_options,
    progress_bar,
    step_options,
    with_step,
)
from analyzer.words import plural

# A concurrent sweep point's load figures in the table: replay_load_summary's key -> column.
SWEEP_LOAD_COLUMNS = {
    "ttft_p50_s": "ttft_p50_s",
    "ttft_p99_s": "ttft_p99_s",
    "queue_mean_s": "queue_mean_s",
    "queue_p99_s": "queue_p99_s",
    "num_preemptions": "preemptions",
}


def _with_host_columns(table, points):
    """A sweep with a host KV tier on some point: each point's host hit ratio and the
    requests that waited for a load (0 at a point without a tier); the table as it was
    where no point has one."""
    import pyarrow as pa

    if all(p.host is None for p in points):
        return table
    none = {"host_hit_ratio": 0.0, "host_waited_requests": 0}
    for key, column in (
        ("host_hit_ratio", "host_hit_ratio"),
        ("host_waited_requests", "host_waited"),
    ):
        values = [(p.host or none)[key] for p in points]
        table = table.append_column(column, pa.array(values))
    return table


@cli.command("sweep")
@db_option
@policy_options
@step_options
@click.option(
    "--vary",
    "varies",
    multiple=True,
    metavar="KEY=V1,V2,...",
    help="A knob and its values (one sweep each; num_blocks=auto: the full curve).",
)
@click.option("--grid", is_flag=True, help="Cross product of all --vary knobs, one sweep.")
@click.option(
    "--jobs",
    "--workers",
    "jobs",
    default=2,
    show_default=True,
    type=click.IntRange(min=1),
    help="Workers: processes (or CPUs of a local Ray cluster); 1 runs in this process "
    "(with --dataset: in one worker process).",
)
@measure_from_option
@name_option("the sweep (its points: NAME · VALUE)")
@dataset_option
@executor_options
def sweep_cmd(
    db_path,
    policy_source,
    overrides,
    step_gpu,
    tensor_parallel,
    varies,
    grid,
    jobs,
    measure_from,
    name,
    dataset,
    executor,
    ray_address,
):
    """Replay the trace at each value of a policy knob, one knob at a time (or --grid).

    Each point is a stored replay run; `sweeps` and `sweep_points` index them. A num_blocks
    sweep of a full-attention-only LRU policy comes from one stack-distance pass. With
    --dataset (and a non-local executor) each point's worker reads the trace from the
    dataset; this process holds none of it.
    """
    import pyarrow as pa

    from analyzer.pipeline.sweep import run_sweeps
    from analyzer.report.tables import render

    with progress_bar("sweep", "points") as update:
        outcomes = run_sweeps(
            policy_source,
            with_step(overrides, step_gpu, tensor_parallel),
            list(varies),
            grid=grid,
            jobs=jobs,
            db_path=db_path,
            progress=update,
            executor=executor_spec(executor, jobs, ray_address, default="processes"),
            measure_from=measure_from,
            name=name,
            dataset=dataset,
        )
    for s in outcomes:
        table = pa.table(
            {
                "sweep_id": [s.sweep_id] * len(s.points),
                "knob": [p.knob for p in s.points],
                "value": [p.value for p in s.points],
                "run_id": [p.run_id for p in s.points],
                "prompt_tokens": [p.prompt_tokens for p in s.points],
                "hit_tokens": [p.hit_tokens for p in s.points],
                "sparse_retention_miss_tokens": [p.sparse_retention_miss_tokens for p in s.points],
                "useful_hit_ratio": [p.useful_hit_ratio for p in s.points],
                "sparse_loss_ratio": [p.sparse_loss_ratio for p in s.points],
                "memory_gib": pa.array([p.memory_gib for p in s.points], pa.float64()),
                "caches": [p.num_caches for p in s.points],
                "total_gib": pa.array(
                    [
                        None if p.memory_gib is None else p.memory_gib * p.num_caches
                        for p in s.points
                    ],
                    pa.float64(),
                ),
                "one_pass": [p.one_pass for p in s.points],
            }
        )
        if any(p.load is not None for p in s.points):  # concurrent points: their load
            for key, column in SWEEP_LOAD_COLUMNS.items():
                values = [None if p.load is None else p.load[key] for p in s.points]
                table = table.append_column(column, pa.array(values))
        table = _with_host_columns(table, s.points)
        click.echo(render(table), nl=False)
        n_one = sum(p.one_pass for p in s.points)
        how = f"; {n_one} from one stack-distance pass" if n_one else ""
        click.echo(
            f"sweep {s.sweep_id} ({s.knob}): {plural(len(s.points), 'point')} in "
            f"{s.seconds:.2f} s{how}; "
            f"base policy {s.base_policy.to_json()}"
        )
        for note in s.notes:
            click.echo(f"note: {note}")


@cli.command("calibrate")
@db_option
@policy_options
@step_options
@click.option(
    "--fit",
    "fit",
    multiple=True,
    type=click.Choice(["compute", "memory", "overhead"]),
    help="With --gpu: a group of the roofline's efficiency factors to fit, each scaled by one "
    "factor (repeat the option) [default: compute and memory].",
)
@click.option(
    "--max-requests",
    type=click.IntRange(min=1),
    default=None,
    help="The search replays the trace's first N requests (arrival order) [default: every "
    "request; with --gpu 2000].",
)
@click.option(
    "--max-replays",
    type=click.IntRange(min=1),
    default=None,
    help="With --gpu: stop the search after N replays [default: 120].",
)
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=0),
    default=None,
    help="With --gpu: stop the search after S seconds [default: 600].",
)
@out_file_option(
    "Write the fit to FILE as JSON: the fitted policy, or with --gpu the fitted efficiency "
    "factors and the errors before and after."
)
def calibrate_cmd(db_path, policy_source, overrides, step_gpu, tensor_parallel, out, **search):
    """Fit the concurrent schedule's step time to the trace's observed ttft_ms.

    Without a GPU: the linear step (step_base_ms, step_token_us). Each request's simulated
    TTFT is linear in the two for a given schedule: the search starts from the best points
    of a 5 x 5 grid, iterates the least squares on each one's own schedule (a replay at the
    parameters that fit the last one best), and where that does not settle refines the two
    best by a simplex search over the replays' squared error.

    With a host KV tier (--set host_tier_gib=..., and async_scheduling false) each replica
    replays with its tier, as hpa replay does: the tier's hits are not computed, and a
    request's wait for a load joins its fixed lead time.

    With --gpu (and a model with compute figures: --set model=CONFIG.json): the roofline's
    efficiency factors, each group (compute: the MFUs; memory: the bandwidth efficiencies;
    overhead: the fixed times) scaled by one factor, by a search whose every step is a
    concurrent replay of the trace's first requests, bounded by --max-replays and
    --max-seconds.

    Prints the fit and its quality (R^2, errors) over the requests that carry ttft_ms."""
    from analyzer.pipeline.calibrate import calibrate

    roofline = {k: v for k, v in search.items() if v not in (None, ())}
    with heartbeat("calibrate"):
        fit = calibrate(
            policy_source,
            with_step(overrides, step_gpu, tensor_parallel),
            db_path=db_path,
            out=out,
            roofline=roofline,
        )
    for note in fit.notes:
        click.echo(f"note: {note}")
    if hasattr(fit, "efficiency"):
        _echo_roofline_fit(fit)
    else:
        p = fit.policy
        click.echo(
            f"fitted step_base_ms={p.step_base_ms:g} step_token_us={p.step_token_us:g} "
            f"({plural(fit.replays, 'point')} searched: "
            f"{plural(fit.full_replays + fit.cut_short, 'replay')}, {fit.cut_short} cut short)"
        )
        click.echo(
            f"quality over {plural(fit.num_requests, 'request')} with ttft_ms: R^2 "
            f"{fit.r2:.3f}, median "
            f"|error| {fit.median_abs_error_ms:.1f} ms, p90 {fit.p90_abs_error_ms:.1f} ms; mean "
            f"observed {fit.mean_observed_ms:.1f} ms, simulated {fit.mean_simulated_ms:.1f} ms"
        )
    if out is not None:
        click.echo(f"wrote {out}")


def _echo_roofline_fit(fit) -> None:
    """The roofline's fit: the factors, how the search went, the errors before and after,
    and the policy keys that replay with it."""
    import json

    from analyzer.pipeline.calibrate_roofline import GROUPS

    e, start = fit.efficiency.as_dict(), fit.start.as_dict()
    click.echo(f"step model: {fit.step_model}")
    for name in fit.fitted:
        fields = ", ".join(f"{k} {start[k]:.4g} -> {e[k]:.4g}" for k in GROUPS[name])
        click.echo(f"fitted {name} x{fit.scales[name]:.3f}: {fields}")
    click.echo(
        f"search: {plural(fit.replays, 'replay')} ({fit.replays - 2} of the first "
        f"{plural(fit.search_requests, 'request')}), stopped: {fit.stopped}; {fit.seconds:.1f} s "
        "(bounded by --max-replays and --max-seconds)"
    )
    for label, q in (("before (defaults)", fit.before), ("after (fitted)", fit.after)):
        click.echo(
            f"{label}: median |error| {q.median_abs_error_pct:.1f} % "
            f"({q.median_abs_error_ms:.1f} ms), p90 {q.p90_abs_error_ms:.1f} ms, R^2 "
            f"{q.r2:.3f}; mean simulated {q.mean_simulated_ms:.1f} ms, observed "
            f"{q.mean_observed_ms:.1f} ms over {plural(q.num_requests, 'request')} with ttft_ms"
        )
    keys = fit.policy_keys()
    rounded = {k: float(f"{v:.4g}") for k, v in keys.pop("step_efficiency").items()}
    click.echo(
        "policy keys: "
        + " ".join(f"{k}={v}" for k, v in keys.items())
        + f" step_efficiency={json.dumps(rounded, separators=(',', ':'))}"
    )


@cli.command("report")
@db_option
@click.option(
    "--run",
    "runs",
    multiple=True,
    type=int,
    help="A replay run id to include (repeatable) [default: every run that is no sweep point].",
)
@click.option(
    "-o",
    "--out",
    default="report.html",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="HTML file to write (self-contained: opens offline).",
)
@click.option(
    "--window",
    default=None,
    metavar="START..END",
    help="With --baseline: an incident section comparing this window of the first --run "
    "(default: the latest run) to the baseline, as hpa compare does.",
)
@baseline_option
@click.option(
    "--bin",
    "bin_s",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Width of the time charts' windows [default: a round width, about 24 windows].",
)
@click.option(
    "--target",
    type=float,
    default=None,
    metavar="RATIO",
    help="A useful-hit ratio for the capacity curves: the line, and each sweep's smallest "
    "pool reaching it marked.",
)
def report_cmd(
    db_path: str,
    runs: tuple[int, ...],
    out: str,
    window: str | None,
    baseline: str | None,
    bin_s: float | None,
    target: float | None,
) -> None:
    """Write one self-contained HTML report: a summary, loss waterfalls, hits over time,
    junctions, policies side by side and each run's exact configuration; with --window
    and --baseline, an incident section after the summary."""
    from analyzer.pipeline.report import write_report

    with heartbeat("report"):
        result = write_report(
            out,
            db_path=db_path,
            runs=list(runs) or None,
            window=window,
            baseline=baseline,
            bin_s=bin_s,
            target=target,
        )
    click.echo(
        f"wrote {result.path} ({result.num_bytes:,} bytes): runs "
        f"{', '.join(map(str, result.run_ids))}, {len(result.figure_ids)} figures"
    )
