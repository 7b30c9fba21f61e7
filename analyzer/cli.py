"""The `hpa` command line: each command parses options, calls one library function, prints."""

from __future__ import annotations

import sys
from contextlib import contextmanager

import click

from analyzer.errors import AnalyzerError, ConfigError
from analyzer.store.db import DEFAULT_DB
from analyzer.traces.formats import FORMATS

db_option = click.option(
    "--db",
    "db_path",
    default=DEFAULT_DB,
    show_default=True,
    type=click.Path(dir_okay=False),
    help="DuckDB file holding the tables.",
)


def policy_options(command):
    """--policy and --set, shared by every command that builds a replay policy."""
    command = click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override one policy key; VALUE is JSON (null, 0, [..]) or a string.",
    )(command)
    return click.option(
        "--policy",
        "policy_source",
        default="vllm-default",
        show_default=True,
        help="A policy file (.json/.toml) or preset name (schemas/policies/).",
    )(command)


def executor_options(command):
    """--executor, --workers and --ray-address, shared by match, replay, sweep and plan."""
    command = click.option(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="With --executor ray: an existing cluster (e.g. auto, ray://host:10001); "
        "without it a local cluster is started.",
    )(command)
    return click.option(
        "--executor",
        default=None,
        type=click.Choice(["local", "processes", "ray"]),
        help="Where partitions run: this process, local cores, or a Ray cluster "
        "(identical results) [default: local; sweep: processes].",
    )(command)


def workers_option(command):
    return click.option(
        "--workers",
        default=None,
        type=click.IntRange(min=1),
        help="Worker processes (processes), or CPUs of a local Ray cluster [default: cores].",
    )(command)


def shard_tokens_option(command):
    return click.option(
        "--shard-tokens",
        default=256,
        show_default=True,
        type=click.IntRange(min=1),
        metavar="K",
        help="With a non-local executor: shard the matcher by each request's first K "
        "tokens (hash-id traces: whole blocks); one more partition matches every request "
        "cut to K tokens. Never changes a result.",
    )(command)


def dataset_option(command):
    return click.option(
        "--dataset",
        default=None,
        type=click.Path(),
        help="Read requests from a Parquet dataset (a folder of files in the requests "
        "table's layout) instead of the database; results are still written to --db.",
    )(command)


def _executor(
    name: str | None,
    workers: int | None,
    ray_address: str | None,
    default="local",
    shard_tokens: int | None = None,
):
    from analyzer.executors import DEFAULT_SHARD_TOKENS, ExecutorSpec

    if ray_address is not None and name is None:
        name = "ray"
    k = DEFAULT_SHARD_TOKENS if shard_tokens is None else shard_tokens
    return ExecutorSpec(name or default, workers=workers, ray_address=ray_address, shard_tokens=k)


class _Group(click.Group):
    """Turns library errors into one-line messages with the error's exit code."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AnalyzerError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"Error: {exc}", err=True)
            sys.exit(exc.exit_code)


@click.group(cls=_Group)
@click.version_option(package_name="hybrid-prefix-analyzer")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Find the prefix-cache hits a hybrid model lost, and why."""
    ctx.ensure_object(dict)["debug"] = debug


@contextmanager
def _progress_bar(label: str):
    """Yields update(done, total) drawing a progress bar on a terminal, or None when stderr
    is not a terminal (pipes and logs stay clean); the bar is closed on exit."""
    if not sys.stderr.isatty():
        yield None
        return
    state: dict = {}

    def update(done: int, total: int) -> None:
        bar = state.get("bar")
        if bar is None:
            bar = state["bar"] = click.progressbar(
                length=max(total, 1), label=label, file=sys.stderr
            )
            bar.__enter__()
        bar.update(done - bar.pos)

    try:
        yield update
    finally:
        if state.get("bar") is not None:
            state.pop("bar").__exit__(None, None, None)


@contextmanager
def _counter(label: str, unit: str):
    """Yields update(n) showing a running count on a terminal (steps of unknown length),
    or None when stderr is not a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    shown = [False]

    def update(n: int) -> None:
        shown[0] = True
        click.echo(f"\r{label}: {n:,} {unit}", nl=False, err=True)

    try:
        yield update
    finally:
        if shown[0]:
            click.echo(err=True)


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@db_option
@click.option(
    "--format",
    "fmt",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", *FORMATS]),
    help="Input format; auto reads the suffix (.jsonl/.parquet/.csv, also .gz/.zst).",
)
@click.option("--allow-rejects", is_flag=True, help="Exit 0 even when some records were rejected.")
def ingest(files: tuple[str, ...], db_path: str, fmt: str, allow_rejects: bool) -> None:
    """Store request records from FILES in the database; list every rejected record.

    Exit status: 0 when every record was stored (or --allow-rejects), 1 when some were
    rejected, 2 when a file is missing or cannot be parsed at all.
    """
    from analyzer.store.ingest import ingest as ingest_files

    with _progress_bar("ingest") as update:
        result = ingest_files(files, db_path=db_path, fmt=fmt, progress=update)
    for src in result.sources:
        if src.duplicate_of is not None:
            click.echo(
                f"{src.path}: identical to source {src.duplicate_of} "
                f"(sha256 {src.sha256[:12]}), nothing added"
            )
            continue
        skipped = f"; {src.num_skipped:,} other lines skipped" if src.num_skipped else ""
        click.echo(
            f"{src.path}: read {src.num_read:,} = stored {src.num_stored:,} + "
            f"rejected {src.num_rejected:,} ({src.num_prompt_tokens:,} prompt tokens{skipped})"
        )
        for rej in src.rejects:
            field = f"{rej.field}: " if rej.field else ""
            click.echo(f"  rejected {src.path}:{rej.line_no}: {field}{rej.reason}", err=True)
        if src.num_rejected > len(src.rejects):
            click.echo(
                f"  ... and {src.num_rejected - len(src.rejects):,} more: "
                f'hpa query "SELECT * FROM rejects WHERE source_id = {src.source_id}"',
                err=True,
            )
    if len(result.sources) > 1:
        click.echo(
            f"total: read {result.num_read:,} = stored {result.num_stored:,} + "
            f"rejected {result.num_rejected:,}"
        )
    if result.num_rejected and not allow_rejects:
        sys.exit(1)


@cli.command()
@click.argument("sql")
@db_option
@click.option(
    "--format",
    "fmt",
    default="table",
    show_default=True,
    type=click.Choice(["table", "csv", "json"]),
    help="Output format.",
)
def query(sql: str, db_path: str, fmt: str) -> None:
    """Run SQL over the stored tables (requests, rejects, sources, ...) and print the result."""
    from analyzer.report.tables import render
    from analyzer.store.query import run_query

    click.echo(render(run_query(sql, db_path=db_path), fmt), nl=False)


@cli.command("synth")
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--scenario", default="mixed", show_default=True, help="diagnostic, groups or mixed.")
@click.option("--seed", default=0, show_default=True, type=int, help="Random seed.")
@click.option("--num-requests", type=int, default=None, help="Same as --param num_requests=N.")
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="A scenario parameter (repeatable), e.g. shared_tokens=1088.",
)
@click.option(
    "--block-size",
    type=int,
    default=None,
    help="Write block_hash_ids of this many tokens instead of token ids.",
)
def synth_cmd(
    out: str,
    scenario: str,
    seed: int,
    num_requests: int | None,
    params: tuple[str, ...],
    block_size: int | None,
) -> None:
    """Write a seeded synthetic trace to OUT (JSONL; .gz/.zst compress)."""
    from analyzer.traces.synth import generate, parse_params, write_jsonl

    values = parse_params(scenario, params)
    if num_requests is not None:
        values["num_requests"] = num_requests
    records = generate(scenario, seed=seed, block_size=block_size, arrays=True, **values)
    stats = write_jsonl(records, out)
    click.echo(f"synth: {stats.records} records, {stats.prompt_tokens} prompt tokens -> {out}")


@cli.command()
@click.option(
    "--out",
    "out_dir",
    default="build/demo",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder for the demo databases (replaced).",
)
@click.option(
    "--samples",
    "samples_dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Folder of sample traces [default: sample_traces/ here or above].",
)
def demo(out_dir: str, samples_dir: str | None) -> None:
    """Run the whole pipeline on the bundled sample traces."""
    from analyzer.demo import run_demo
    from analyzer.report.tables import render

    with _progress_bar("demo") as update:
        result = run_demo(out_dir, samples_dir=samples_dir, progress=update)
    src = result.ingested.sources[0]
    click.echo(
        f"ingest {src.path}: read {src.num_read:,} = stored {src.num_stored:,} + "
        f"rejected {src.num_rejected:,}"
    )
    for line in result.matched.lines():
        click.echo(f"match: {line}")
    click.echo("\nreplay of the mixed trace on qwen3-next-80b-a3b (B=544), one knob at a time:")
    click.echo(render(result.policies), nl=False)
    click.echo("\nSPEC 6 worked examples (hit/sparse-retention-miss tokens per request):")
    click.echo(render(result.cases), nl=False)
    click.echo(f"\ncapacity sweeps: {result.num_sweep_points} points (tables sweeps, sweep_points)")
    click.echo(
        f'database: {result.db_path}  (try: hpa query "SELECT * FROM '
        f'replay_summary" --db {result.db_path})'
    )
    click.echo(f"report: {result.report_path}")


@cli.command("match")
@db_option
@click.option(
    "--backend",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "numpy", "cupy"]),
    help="Array backend: auto uses CuPy when it imports and sees a GPU.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also export prefix_matches to FILE (.parquet, .jsonl or .csv).",
)
@click.option(
    "--derive-families",
    is_flag=True,
    help="Label requests without a prompt_family by the first junction on their "
    "prompt path at >= --min-family-tokens tokens (their shared system "
    "prompt) as j<position>-<id>, or 'unshared'; source derived:first_junction.",
)
@click.option(
    "--min-family-tokens",
    default=32,
    show_default=True,
    type=click.IntRange(min=1),
    help="Shallowest junction position (tokens) that can anchor a derived family.",
)
@click.option(
    "--chunk-tokens",
    default=1 << 22,
    show_default=True,
    type=click.IntRange(min=1),
    help="Tokens read per chunk: bounds memory, never changes a result.",
)
@dataset_option
@executor_options
@workers_option
@shard_tokens_option
def match_cmd(
    db_path: str,
    backend: str,
    out: str | None,
    derive_families: bool,
    min_family_tokens: int,
    chunk_tokens: int,
    dataset: str | None,
    executor: str | None,
    ray_address: str | None,
    workers: int | None,
    shard_tokens: int,
) -> None:
    """Find each request's longest prefix shared with earlier requests, and the junctions.

    Writes table prefix_matches (shared_any_tokens, shared_parent_request_id,
    shared_replica_tokens, shared_conversation_tokens per request) and table junctions
    (branch points of the prefix tree). Exact at token level.
    """
    from analyzer.prefixes.api import match_prefixes
    from analyzer.prefixes.engine import MatchOptions

    with _progress_bar("match") as update:
        summary = match_prefixes(
            db_path,
            backend=backend,
            out=out,
            derive_families=derive_families,
            min_family_tokens=min_family_tokens,
            options=MatchOptions(chunk_tokens=chunk_tokens, progress=update),
            executor=_executor(executor, workers, ray_address, shard_tokens=shard_tokens),
            dataset=dataset,
        )
    for line in summary.lines():
        click.echo(line)


@cli.command()
@db_option
@policy_options
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="Also export this run's replay_requests (.parquet, .jsonl or .csv).",
)
@click.option(
    "--measure-from",
    "measure_from",
    type=float,
    default=0.0,
    show_default=True,
    metavar="FRACTION",
    help="Warm-up exclusion: replay every request but aggregate only those with arrival "
    "index >= floor(FRACTION * n) (0 <= FRACTION < 1).",
)
@dataset_option
@executor_options
@workers_option
@shard_tokens_option
def replay(
    db_path: str,
    policy_source: str,
    overrides: tuple[str, ...],
    out: str | None,
    measure_from: float,
    dataset: str | None,
    executor: str | None,
    ray_address: str | None,
    workers: int | None,
    shard_tokens: int,
) -> None:
    """Replay the stored trace through a hybrid prefix cache and account for every token.

    Writes replay_runs, replay_requests (one row per request: hits, sparse-retention
    misses and the loss waterfall) and replay_summary (per prompt family x model
    revision), then prints the summary. `--policy a,b,c` replays several policies (each
    with the --set overrides) one after another and prints them side by side.
    """
    from analyzer.replay import check_measure_from, run_replay, side_by_side
    from analyzer.report.tables import render
    from analyzer.sim.policy import load_policy
    from analyzer.store.export import check_export_path

    check_measure_from(measure_from)
    spec = _executor(executor, workers, ray_address, shard_tokens=shard_tokens)
    names = [name.strip() for name in policy_source.split(",")]
    if not all(names):
        raise ConfigError(f"--policy {policy_source!r}: an empty name in the list")
    policies = [load_policy(name, list(overrides)) for name in names]
    if out is not None and len(policies) > 1:
        raise ConfigError("--out: exports one run; give a single --policy")
    if out is not None:
        check_export_path(out)
    outcomes = []
    for policy in policies:
        with _progress_bar("replay partitions") as update:
            result = run_replay(
                policy,
                db_path=db_path,
                out=out,
                progress=update,
                measure_from=measure_from,
                executor=spec,
                dataset=dataset,
            )
        outcomes.append(result)
        _print_replay(policy, result, render)
    if len(outcomes) > 1:
        click.echo("\nside by side (measured requests):")
        click.echo(render(side_by_side(names, outcomes)), nl=False)
    if out is not None:
        click.echo(f"wrote {out}")


def _print_replay(policy, result, render) -> None:
    cols = [
        "prompt_family",
        "model_revision",
        "num_requests",
        "prompt_tokens",
        "hit_tokens",
        "sparse_retention_miss_tokens",
        "useful_hit_ratio",
        "sparse_loss_ratio",
    ]
    click.echo(render(result.summary.select(cols)), nl=False)
    click.echo(
        f"run {result.run_id}: {result.num_requests:,} requests replayed in "
        f"{result.seconds:.2f} s; policy {policy.to_json()}"
    )
    for note in result.notes:
        click.echo(f"note: {note}")
    if result.num_errors:
        click.echo(
            f"warning: {result.num_errors:,} requests could not be scheduled at all "
            f"(num_blocks {policy.num_blocks} is too small for them); see "
            f"replay_requests.error",
            err=True,
        )


@cli.command("metrics")
@db_option
@click.option("--run", "run", type=int, default=None, help="Replay run id [default: the latest].")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the text to FILE (e.g. for node_exporter's textfile collector).",
)
def metrics_cmd(db_path: str, run: int | None, out: str | None) -> None:
    """Print a replay run's counters as Prometheus text (exposition format 0.0.4).

    vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total,
    vllm:prefix_cache_sparse_retention_misses_total, hpa_prefix_cache_lost_tokens_total
    {cause=unshared|routing|granularity|eviction|sparse_retention_never_kept|
    sparse_retention_evicted|spec_decode} and hpa_replay_requests_total, labelled by run,
    prompt_family and model_revision.
    """
    from analyzer.metrics.prometheus import prometheus_metrics, write_metrics

    result = prometheus_metrics(db_path=db_path, run=run)
    if out is None:
        click.echo(result.text, nl=False)
    else:
        write_metrics(result.text, out)
        click.echo(f"run {result.run_id}: wrote {out}")


@cli.command("compare")
@db_option
@click.option("--window", default=None, metavar="START..END", help="The current window.")
@click.option("--baseline", default=None, metavar="START..END", help="The baseline window.")
@click.option(
    "--run",
    "runs",
    type=int,
    multiple=True,
    help="With windows: the run [default: latest]. Twice (A then B): compare two runs.",
)
@click.option(
    "--format",
    "fmt",
    default="table",
    show_default=True,
    type=click.Choice(["table", "json"]),
    help="Output format; json is one object with every figure.",
)
def compare_cmd(
    db_path: str, window: str | None, baseline: str | None, runs: tuple[int, ...], fmt: str
) -> None:
    """Attribute a change of the useful hit ratio to loss causes.

    Two windows of one run (--window START..END --baseline START..END [--run RUN]; seconds
    of the trace's timestamps or RFC 3339, half-open, an empty end is open) or two runs of
    the same trace (--run A --run B; A is the baseline). Per prompt family x model
    revision: each cause's share of that side's queried tokens, the change in points, and
    the estimated TTFT change (ttft_ms = a + b x fresh_prefill_tokens fitted per revision).
    """
    from analyzer.metrics.compare import compare
    from analyzer.report.tables import render

    result = compare(db_path=db_path, window=window, baseline=baseline, runs=runs)
    if fmt == "json":
        click.echo(result.to_json().decode(), nl=False)
        return
    click.echo(result.baseline.describe())
    click.echo(result.current.describe())
    click.echo("")
    cols = [
        "prompt_family",
        "model_revision",
        "baseline_requests",
        "current_requests",
        "baseline_useful_hit_ratio",
        "current_useful_hit_ratio",
        "change_points",
        "baseline_est_ttft_ms",
        "current_est_ttft_ms",
        "est_ttft_change_ms",
    ]
    click.echo(render(result.groups.select(cols)), nl=False)
    click.echo("\nshares of each side's queried tokens (change in points):")
    nonzero = [
        i
        for i, (b, c) in enumerate(
            zip(
                result.causes.column("baseline_tokens").to_pylist(),
                result.causes.column("current_tokens").to_pylist(),
                strict=True,
            )
        )
        if b or c
    ]
    click.echo(render(result.causes.take(nonzero)), nl=False)
    click.echo("")
    for line in result.fit_lines():
        click.echo(line)
    click.echo(result.sentence)


@cli.command("sweep")
@db_option
@policy_options
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
    default=2,
    show_default=True,
    type=int,
    help="Workers: processes (or CPUs of a local Ray cluster); 1 runs in this process.",
)
@executor_options
def sweep_cmd(db_path, policy_source, overrides, varies, grid, jobs, executor, ray_address):
    """Replay the trace at each value of a policy knob, one knob at a time (or --grid).

    Each point is a stored replay run; `sweeps` and `sweep_points` index them. A num_blocks
    sweep of a full-attention-only LRU policy comes from one stack-distance pass.
    """
    import pyarrow as pa

    from analyzer.report.tables import render
    from analyzer.sweep.sweep import run_sweeps

    with _progress_bar("sweep points") as update:
        outcomes = run_sweeps(
            policy_source,
            list(overrides),
            list(varies),
            grid=grid,
            jobs=jobs,
            db_path=db_path,
            progress=update,
            executor=_executor(executor, jobs, ray_address, default="processes"),
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


@cli.command("plan")
@db_option
@click.option(
    "--target-useful-hit-ratio",
    "target",
    required=True,
    type=float,
    help="The useful hit ratio (hits / queries) to reach, in (0, 1].",
)
@click.option("--model", default=None, help="Model preset (schemas/models/).")
@click.option("--memory-budget", default=None, help="Cache memory per replica, e.g. 40GiB.")
@click.option("--family", default=None, help="Measure one prompt family only.")
@executor_options
@workers_option
def plan_cmd(db_path, target, model, memory_budget, family, executor, ray_address, workers):
    """Search the cheapest cache settings that reach a target useful hit ratio (by replays)."""
    import pyarrow as pa

    from analyzer.report.tables import render
    from analyzer.sweep.plan import plan

    with _counter("plan", "replays") as update:
        r = plan(
            target,
            model=model,
            memory_budget=memory_budget,
            family=family,
            db_path=db_path,
            progress=update,
            executor=_executor(executor, workers, ray_address),
        )
    click.echo(
        f"ceilings: attention-only bound {r.attention_only_bound:.3f}, shared-prefix ceiling "
        f"{r.shared_prefix_ceiling:.3f}, model groups unbounded (retention null) "
        f"{r.unbounded_ratio:.3f}"
    )
    if r.candidates:
        c = r.candidates
        table = pa.table(
            {
                "retention_interval": pa.array([x.retention_interval for x in c], pa.int64()),
                "prefix_match_unit": pa.array([x.prefix_match_unit for x in c], pa.int64()),
                "replicas": [x.replicas for x in c],
                "routing": [x.routing for x in c],
                "num_blocks": [x.num_blocks for x in c],
                "useful_hit_ratio": [x.useful_hit_ratio for x in c],
                "memory_gib": pa.array([x.memory_gib for x in c], pa.float64()),
                f"cost_{r.cost_unit.lower()}": [float(x.cost) for x in c],
            }
        )
        click.echo(render(table), nl=False)
    click.echo(f"{r.message} [{r.replays} replays]")
    if not r.reachable:
        sys.exit(1)


@cli.command("report")
@db_option
@click.option(
    "--run",
    "runs",
    multiple=True,
    type=int,
    help="A replay run id to include (repeatable) [default: every run].",
)
@click.option(
    "-o",
    "--out",
    default="report.html",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="HTML file to write (self-contained: opens offline).",
)
def report_cmd(db_path: str, runs: tuple[int, ...], out: str) -> None:
    """Write one self-contained HTML report: loss waterfalls, hits over time, junctions,
    policies side by side and each run's exact configuration."""
    from analyzer.report.html import render_report

    result = render_report(db_path, out, runs=list(runs) or None)
    click.echo(
        f"wrote {result.path} ({result.num_bytes:,} bytes): runs "
        f"{', '.join(map(str, result.run_ids))}, {len(result.figure_ids)} figures"
    )


@cli.command("validate")
@db_option
@click.option("--run", "run", type=int, default=None, help="Replay run id [default: the latest].")
@click.option(
    "--metrics",
    type=click.Path(dir_okay=False),
    default=None,
    help="A saved vLLM /metrics text; its counters started at zero.",
)
@click.option(
    "--metrics-before",
    type=click.Path(dir_okay=False),
    default=None,
    help="A /metrics text saved before the window (with --metrics-after).",
)
@click.option(
    "--metrics-after",
    type=click.Path(dir_okay=False),
    default=None,
    help="A /metrics text saved after the window (with --metrics-before).",
)
@click.option("--model-name", default=None, help="Only counters labelled model_name=NAME.")
@click.option("--since", default=None, help="Window start: timestamp_s >= it (s or RFC 3339).")
@click.option("--until", default=None, help="Window end: timestamp_s < it (s or RFC 3339).")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also export the comparison rows (.parquet, .jsonl or .csv).",
)
def validate_cmd(
    db_path, run, metrics, metrics_before, metrics_after, model_name, since, until, out
) -> None:
    """Compare a replay run with what a live engine observed.

    Per request: requests.cached_tokens (engine-reported cached prompt tokens) against
    the replay's hit_tokens, per prompt family x model revision and overall; requests
    without cached_tokens are counted as not observed. Server counters: deltas of
    vllm:prefix_cache_queries / _hits / _sparse_retention_misses between two saved
    /metrics texts against the replay's sums over the same request window. error =
    predicted - observed. Stored in table validations.
    """
    from analyzer.metrics.validate import CACHED, validate
    from analyzer.report.tables import render

    r = validate(
        db_path=db_path,
        run=run,
        metrics=metrics,
        metrics_before=metrics_before,
        metrics_after=metrics_after,
        model_name=model_name,
        since=since,
        until=until,
        out=out,
    )
    click.echo(f"validation {r.validation_id}: {r.window}")
    per_request = r.table(CACHED)
    if per_request.num_rows:
        click.echo(f"\nper request: replay hit_tokens vs {CACHED}")
        click.echo(render(per_request.drop_columns(["source", "figure"])), nl=False)
    missing = r.requests - r.observed_requests
    if missing:
        click.echo(
            f"not observed: {missing:,} of {r.requests:,} requests have no cached_tokens "
            "(not compared)"
        )
    counters = r.table("metrics")
    if counters.num_rows:
        click.echo("\nserver counters: replay sums vs /metrics deltas over the same window")
        cols = ["source", "figure", "requests", "observed_tokens", "predicted_tokens"]
        cols += ["error_tokens", "relative_error"]
        click.echo(render(counters.select(cols)), nl=False)
        click.echo(r.metrics_note)
    click.echo("error_tokens = predicted - observed; stored in table validations")
    if out is not None:
        click.echo(f"wrote {out}")


@cli.command("probe")
@policy_options
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder for probe.jsonl, expected.csv and trace.jsonl (created).",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the token ids.")
@click.option(
    "--model", default=None, help="Served model name for the bodies [default: policy model]."
)
def probe_cmd(policy_source, overrides, out_dir, seed, model) -> None:
    """Write the seed article's diagnostic for a policy's geometry, with expected counters.

    Families of a cold request and two repeats sharing a known prefix (2 blocks), and
    prefixes ending just before and just after each legal boundary (block, match unit,
    retention interval). probe.jsonl holds OpenAI completions bodies in send order;
    expected.csv the replay's per-request deltas of vLLM's prefix-cache counters.
    """
    from analyzer.probe import send_hint, write_probe
    from analyzer.report.tables import render
    from analyzer.sim.policy import load_policy

    policy = load_policy(policy_source, list(overrides))
    p = write_probe(policy, out_dir, seed=seed, model=model)
    cols = ["step", "prompt_tokens", "shared_prefix_tokens", "prefix_cache_queries"]
    cols += ["prefix_cache_hits", "prefix_cache_sparse_retention_misses"]
    click.echo(render(p.expected.select(cols)), nl=False)
    click.echo(
        f"{len(p.requests)} requests for model {p.model!r} (seed {p.seed}); policy "
        f"{policy.to_json()}"
    )
    click.echo(f"wrote {', '.join(str(f) for f in p.files)}")
    click.echo("send serially to a fresh server (one engine, no other traffic), e.g.:")
    click.echo(f"  {send_hint(out_dir)}")


def main() -> None:
    cli(prog_name="hpa")
