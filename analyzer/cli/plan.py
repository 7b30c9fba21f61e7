"""`hpa plan`: the cheapest cache settings that reach a target, or with a latency target the
fewest GPUs whose fleet meets it; the command and how its answer is printed."""

from __future__ import annotations

import sys

import click

from analyzer.cli.base import (
    cli,
    counter,
    db_option,
    executor_options,
    executor_spec,
    json_format_option,
    measure_from_option,
    policy_options,
    workers_option,
)
from analyzer.words import plural

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
    help="Cache memory per cache (model revision x replica), with a unit: e.g. 40GiB, "
    "512MiB, 80GB.",
)
@click.option(
    "--host-memory-budget",
    default=None,
    help="Also plan a host (CPU) KV tier of at most this much memory per cache (vLLM's "
    "--kv-offloading-size; e.g. 64GiB), priced apart from the GPU's: how much GPU cache it "
    "saves at the target, and the smallest tier that saves it. With --ttft-p99 or "
    "--tpot-p99 (and async_scheduling false): the fleets searched again with this much on "
    "every replica, and how many GPUs (replicas) it saves at the same targets.",
)
@click.option("--family", default=None, help="Measure one prompt family only.")
@click.option(
    "--window",
    default=None,
    metavar="START..END",
    help="Measure the requests of one time window only, as `hpa compare --window` selects "
    "them (seconds of the trace's timestamps or RFC 3339, half-open); the requests before "
    "it are replayed as its warm-up, those after it not at all.",
)
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
@json_format_option(
    "json: one JSON object on stdout (the cheapest setting's figures at the top level)."
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

    With --ttft-p99 or --tpot-p99 (and --schedule concurrent): the fewest GPUs (replicas
    without --gpu) whose fleet meets every target, searched over tensor parallel, replicas,
    router and pool per replica by fleet replays, and checked by a replay at the answer and
    at the fleet one step smaller.

    With --dataset (and a non-local executor) each replay's or setting's worker reads the
    trace from the dataset; this process holds its per-request scalars only. Nothing is
    written to --db."""
    from analyzer.config.policy import policy_values
    from analyzer.pipeline.plan import plan

    _note_searched_sets(overrides, asked)
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
        update(r.replays, end=True)  # the last line counts what the answer counts
    if fmt == "json":
        import orjson

        click.echo(orjson.dumps(r.as_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        _print_plan(r)
    if not (r.reachable or (r.at_block is not None and r.at_block.reachable)):
        sys.exit(1)


def _note_searched_sets(overrides, asked: dict) -> None:
    """A --set of a key the plan searches itself is left out of every replay: say so on
    stderr (it was dropped in silence, `--set num_blocks=-1` included)."""
    from analyzer.pipeline.plan.planner import FLEET_SEARCHED, SEARCHED

    latency = asked.get("ttft_p99_s") is not None or asked.get("tpot_p99_s") is not None
    searched = FLEET_SEARCHED if latency else SEARCHED
    for item in overrides:
        key = item.partition("=")[0].strip()
        if key in searched:
            click.echo(f"note: --set {item} is left out: the plan searches {key} itself", err=True)


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
    short = f", {r.replays_cut_short} cut short" if r.replays_cut_short else ""
    click.echo(f"{r.message} [{plural(r.replays, 'replay')}{short}]")
    if r.check:
        click.echo(r.check)
    if r.at_block is not None:
        click.echo(f"\nplan at block_size {r.at_block.block_size:,} (every other key as asked):")
        _print_plan(r.at_block)
    if r.host_tier is not None:
        click.echo(r.host_tier.message)
        if r.host_tier.check:
            click.echo(r.host_tier.check)


def _candidate_columns(r) -> dict:
    """The table's columns: a setting a row; a latency plan's fleets have their own."""
    c = r.candidates
    if r.ttft_p99_target_s is not None or r.tpot_p99_target_s is not None:
        return _fleet_columns(r)
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
    if r.schedule == "concurrent":
        loads = [x.load for x in c]
        for key in ("ttft_p50_s", "ttft_p99_s", "queue_mean_s", "max_in_flight", "saturated"):
            columns[key] = [None if load is None else getattr(load, key) for load in loads]
    if c[0].gpus is not None:
        columns["tensor_parallel"] = [x.gpus.tensor_parallel for x in c]
        columns["total_gpus"] = [x.gpus.total_gpus for x in c]
        columns["fits"] = [x.gpus.fits for x in c]
    return columns


def _fleet_columns(r) -> dict:
    """A fleet a row (the answer first): its shape, its pool, what it reached (the cache
    settings are the policy's, the same in every row)."""
    c = r.candidates
    columns: dict = {}
    if c[0].tensor_parallel is not None:
        columns["total_gpus"] = [x.total_gpus for x in c]
        columns["tensor_parallel"] = [x.tensor_parallel for x in c]
    columns["replicas"] = [x.replicas for x in c]
    columns["routing"] = [x.routing for x in c]
    columns["num_blocks"] = _counts([x.num_blocks for x in c])
    if c[0].tensor_parallel is not None:
        columns["room_blocks"] = _counts([x.room_blocks for x in c])
    columns[f"total_{r.cost_unit.lower()}"] = [
        None if x.num_blocks is None else float(x.cost) for x in c
    ]
    columns["useful_hit_ratio"] = [x.useful_hit_ratio for x in c]
    loads = [x.load for x in c]
    for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p99_s", "goodput_rps", "saturated"):
        columns[key] = [None if load is None else getattr(load, key) for load in loads]
    columns["sized_by"] = [x.sized_by for x in c]
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


def _counts(values: list[int | None]) -> list:
    """Block counts as every table prints a number (1,618, right-aligned); where one is
    unbounded (None), each as text: null, 1,618."""
    return values if None not in values else ["null" if v is None else f"{v:,}" for v in values]


def _null(value: int | None) -> str:
    """A policy value as the policy file writes it (null, not a blank cell)."""
    return "null" if value is None else str(value)
