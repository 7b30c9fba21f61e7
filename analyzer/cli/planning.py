"""Commands for capacity planning and reports: sweep, plan, calibrate, report."""

from __future__ import annotations

import sys

import click

from analyzer.cli.base import (
    baseline_option,
    cli,
    counter,
    dataset_option,
    db_option,
    executor_options,
    executor_spec,
    measure_from_option,
    name_option,
    out_file_option,
    policy_options,
    progress_bar,
    step_options,
    with_step,
    workers_option,
)


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
    type=int,
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
        click.echo(render(table), nl=False)
        n_one = sum(p.one_pass for p in s.points)
        how = f"; {n_one} from one stack-distance pass" if n_one else ""
        click.echo(
            f"sweep {s.sweep_id} ({s.knob}): {len(s.points)} points in {s.seconds:.2f} s{how}; "
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
    help="With --gpu: the search replays the trace's first N requests [default: 2000].",
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
    TTFT is linear in the two for a given schedule, so they are fitted by least squares and
    the replay is repeated with the fit until they settle.

    With --gpu (and a model with compute figures: --set model=CONFIG.json): the roofline's
    efficiency factors, each group (compute: the MFUs; memory: the bandwidth efficiencies;
    overhead: the fixed times) scaled by one factor, by a search whose every step is a
    concurrent replay of the trace's first requests, bounded by --max-replays and
    --max-seconds.

    Prints the fit and its quality (R^2, errors) over the requests that carry ttft_ms."""
    from analyzer.pipeline.calibrate import calibrate

    roofline = {k: v for k, v in search.items() if v not in (None, ())}
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
            f"({fit.replays} replays)"
        )
        click.echo(
            f"quality over {fit.num_requests:,} requests with ttft_ms: R^2 {fit.r2:.3f}, median "
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
        f"search: {fit.replays} replays ({fit.replays - 2} of the first "
        f"{fit.search_requests:,} requests), stopped: {fit.stopped}; {fit.seconds:.1f} s "
        "(bounded by --max-replays and --max-seconds)"
    )
    for label, q in (("before (defaults)", fit.before), ("after (fitted)", fit.after)):
        click.echo(
            f"{label}: median |error| {q.median_abs_error_pct:.1f} % "
            f"({q.median_abs_error_ms:.1f} ms), p90 {q.p90_abs_error_ms:.1f} ms, R^2 "
            f"{q.r2:.3f}; mean simulated {q.mean_simulated_ms:.1f} ms, observed "
            f"{q.mean_observed_ms:.1f} ms over {q.num_requests:,} requests with ttft_ms"
        )
    keys = fit.policy_keys()
    rounded = {k: float(f"{v:.4g}") for k, v in keys.pop("step_efficiency").items()}
    click.echo(
        "policy keys: "
        + " ".join(f"{k}={v}" for k, v in keys.items())
        + f" step_efficiency={json.dumps(rounded, separators=(',', ':'))}"
    )


SCHEDULE_LINES = {
    "serial": "schedule: serial (each request after the previous one finished, prefill "
    "chunks of max_num_batched_tokens={budget}; --schedule concurrent replays vLLM's "
    "scheduler under load)",
    "concurrent": "schedule: concurrent (vLLM's scheduler on the trace's arrival times, "
    "max_num_batched_tokens={budget}: queueing, requests in flight and preemption count)",
}


@cli.command("plan")
@db_option
@click.option(
    "--target-useful-hit-ratio",
    "target",
    required=True,
    type=float,
    help="The useful hit ratio (hits / queries) to reach, in (0, 1].",
)
@click.option(
    "--model", default=None, help="Model preset (analyzer/schemas/models/) or model file."
)
@click.option(
    "--memory-budget",
    default=None,
    help="Cache memory per cache (model revision x replica), e.g. 40GiB.",
)
@click.option("--family", default=None, help="Measure one prompt family only.")
@click.option(
    "--schedule",
    type=click.Choice(["serial", "concurrent"]),
    default=None,
    help="How every replay runs: serial (one request at a time) or concurrent (vLLM's "
    "scheduler on the trace's arrival times: queueing and preemption count) [default: "
    "the policy's, else serial].",
)
@click.option(
    "--time-scale",
    type=float,
    default=None,
    help="With --schedule concurrent: arrival = (timestamp - earliest) x this [default: 1].",
)
@click.option(
    "--ttft-p99",
    "ttft_p99_s",
    type=float,
    default=None,
    metavar="SECONDS",
    help="With --schedule concurrent: also meet this TTFT p99 (seconds), searching fleets "
    "(tensor parallel with --gpu, replicas, router, pool per replica) for the fewest GPUs.",
)
@click.option(
    "--tpot-p99",
    "tpot_p99_s",
    type=float,
    default=None,
    metavar="SECONDS",
    help="With --schedule concurrent: also meet this p99 time per output token (after the "
    "first), searching fleets as --ttft-p99 does.",
)
@click.option(
    "--routers",
    default=None,
    metavar="A,B,...",
    callback=lambda ctx, param, value: (
        None if value is None else tuple(v.strip() for v in value.split(",") if v.strip())
    ),
    help="With --ttft-p99 or --tpot-p99: the routers searched [default: dynamo, "
    "prefix_aware, llm-d, sglang, least_loaded, round_robin].",
)
@click.option(
    "--max-replicas",
    type=int,
    default=None,
    metavar="N",
    help="With --ttft-p99 or --tpot-p99: the most replicas a fleet searched has [default: 64].",
)
@click.option(
    "--gpu",
    default=None,
    metavar="NAME",
    help="Answer in GPUs of this kind (H100, H200, B200, MI300X): the fewest in all, then "
    "the least cache; needs a --model with bytes_per_block and weights_bytes.",
)
@click.option(
    "--gpu-memory-gib",
    type=float,
    default=None,
    metavar="GIB",
    help="Any other accelerator: its memory in GiB (instead of --gpu).",
)
@click.option(
    "--tensor-parallel",
    type=int,
    default=None,
    metavar="N",
    help="GPUs per replica, with --gpu or --gpu-memory-gib [default: the fewest (a power "
    "of two) that hold the weights and the pool].",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="json: one JSON object on stdout (the cheapest setting's figures at the top level).",
)
@click.option(
    "--dataset",
    default=None,
    type=click.Path(),
    help="Read requests from a Parquet dataset (a folder of files in the requests "
    "table's layout) instead of the database (plan writes nothing).",
)
@measure_from_option
@policy_options
@executor_options
@workers_option
def plan_cmd(
    db_path, target, fmt, dataset, policy_source, overrides, executor, ray_address, workers, **asked
):
    """Search the cheapest cache settings that reach a target useful hit ratio (by replays):
    the smallest pool per setting, under load its latency, with --gpu in GPUs.

    With --dataset (and a non-local executor) each replay's or setting's worker reads the
    trace from the dataset; this process holds its per-request scalars only. Nothing is
    written to --db."""
    from analyzer.config.policy import policy_values
    from analyzer.pipeline.plan import plan

    with counter("plan", "replays") as update:
        r = plan(
            target,
            db_path=db_path,
            dataset=dataset,
            executor=executor_spec(executor, workers, ray_address),
            progress=update,
            policy=policy_values(policy_source, overrides),
            **asked,
        )
    if fmt == "json":
        import orjson

        click.echo(orjson.dumps(r.as_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        _print_plan(r)
    if not r.reachable:
        sys.exit(1)


def _print_plan(r) -> None:
    import pyarrow as pa

    from analyzer.report.tables import render

    click.echo(SCHEDULE_LINES[r.schedule].format(budget=_null(r.max_num_batched_tokens)))
    for note in r.notes:
        click.echo(f"note: {note}")
    click.echo(
        f"ceilings: shared prefix {r.shared_token_ratio:.3f} at token level, "
        f"{r.shared_prefix_ceiling:.3f} in whole blocks or match units (the geometry loses "
        f"{r.shared_token_ratio - r.shared_prefix_ceiling:.3f}); attention-only bound "
        f"{r.attention_only_bound:.3f}, model groups unbounded (retention null) "
        f"{r.unbounded_ratio:.3f}"
    )
    if r.candidates:
        click.echo(render(pa.table(_candidate_columns(r))), nl=False)
    if r.load_warning:
        click.echo(r.load_warning)
    best = r.best
    if best is not None and best.gpus is not None:
        click.echo(_gpu_line(best.gpus))
    click.echo(f"{r.message} [{r.replays} replays]")
    if r.check:
        click.echo(r.check)


def _candidate_columns(r) -> dict:

    c = r.candidates
    columns = {
        "retention_interval": [_null(x.retention_interval) for x in c],
        "prefix_match_unit": [_null(x.prefix_match_unit) for x in c],
        "replicas": [x.replicas for x in c],
        "routing": [x.routing for x in c],
        "num_blocks": [x.num_blocks for x in c],
        "useful_hit_ratio": [x.useful_hit_ratio for x in c],
        "caches": [x.num_caches for x in c],
        # GiB only where a model prices a block (without, memory is counted in blocks)
        **({"memory_gib": [x.memory_gib for x in c]} if r.cost_unit == "GiB" else {}),
        f"total_{r.cost_unit.lower()}": [float(x.cost) for x in c],
        "sized_by": [x.sized_by for x in c],
    }
    latency = r.ttft_p99_target_s is not None or r.tpot_p99_target_s is not None
    if latency:
        columns["num_blocks"] = [_null(x.num_blocks) for x in c]
    if r.schedule == "concurrent":
        loads = [x.load for x in c]
        keys = ["ttft_p50_s", "ttft_p99_s", "queue_mean_s", "max_in_flight", "saturated"]
        if latency:
            keys[2:2] = ["tpot_p99_s", "goodput_rps"]
        for key in keys:
            columns[key] = [None if load is None else getattr(load, key) for load in loads]
    if c[0].gpus is not None:
        columns["tensor_parallel"] = [x.gpus.tensor_parallel for x in c]
        columns["total_gpus"] = [x.gpus.total_gpus for x in c]
        columns["fits"] = [x.gpus.fits for x in c]
    return columns


def _gpu_line(g) -> str:
    """The cheapest setting's GPUs in one line, with why they do not fit when so."""
    line = (
        f"gpus: {g.gpu} ({g.hbm_gib:g} GiB): tensor parallel {g.tensor_parallel}; a GPU holds "
        f"{g.weights_per_gpu_gib:,.1f} GiB of weights and {g.kv_cache_per_gpu_gib:,.2f} GiB "
        f"of the pool, of {g.usable_per_gpu_gib:,.1f} GiB usable (gpu_memory_utilization "
        f"{g.gpu_memory_utilization:g}), so a replica's GPUs have room for "
        f"{g.pool_blocks_fit:,} blocks; {g.gpus_per_replica} a replica x {g.num_caches} "
        f"= {g.total_gpus} GPUs"
    )
    return line if g.fits else f"{line}; {g.message}"


def _null(value: int | None) -> str:
    """A policy value as the policy file writes it (null, not a blank cell)."""
    return "null" if value is None else str(value)


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
