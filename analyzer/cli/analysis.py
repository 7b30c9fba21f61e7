"""Commands that analyse a stored trace: match, replay, metrics, compare."""

from __future__ import annotations

import click

from analyzer.cli.base import (
    baseline_option,
    cli,
    dataset_option,
    db_option,
    executor_options,
    executor_spec,
    json_format_option,
    measure_from_option,
    name_option,
    out_file_option,
    policy_options,
    progress_bar,
    shard_tokens_option,
    step_options,
    with_step,
    workers_option,
)
from analyzer.cli.text import FAMILY_ROWS, more_families_line, say
from analyzer.config.host_tier import NEVER_STORED, never_stored_words
from analyzer.errors import ConfigError
from analyzer.words import plural


@cli.command("match")
@db_option
@click.option(
    "--backend",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "numpy", "cupy"]),
    help="Array backend: auto is numpy (compiled radix trees) unless this machine's GPU is "
    "measured faster at this size; cupy runs the sort matcher on a GPU.",
)
@out_file_option("Also export prefix_matches to FILE (.parquet, .jsonl or .csv).")
@click.option(
    "--derive-families",
    is_flag=True,
    help="Label requests without a prompt_family by the first junction on their "
    "prompt path at >= --min-family-tokens tokens (their shared system "
    "prompt) as j<position>-<id>, or 'below-min-family-tokens' (no junction that "
    "deep: a shorter shared prefix, or none); source derived:first_junction.",
)
@click.option(
    "--min-family-tokens",
    default=32,
    show_default=True,
    type=click.IntRange(min=1),
    help="Shallowest junction position (tokens) that can anchor a derived family.",
)
@click.option(
    "--clear-derived-families",
    is_flag=True,
    help="Remove the prompt families an earlier --derive-families wrote (the trace's own "
    "stay); with --derive-families, derive them anew.",
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
    clear_derived_families: bool,
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
    from analyzer.pipeline.match import match_prefixes
    from analyzer.prefixes.engine import MatchOptions

    with progress_bar("match", "requests") as update:
        summary = match_prefixes(
            db_path,
            backend=backend,
            out=out,
            derive_families=derive_families,
            min_family_tokens=min_family_tokens,
            clear_derived_families=clear_derived_families,
            options=MatchOptions(chunk_tokens=chunk_tokens, progress=update),
            executor=executor_spec(executor, workers, ray_address, shard_tokens=shard_tokens),
            dataset=dataset,
        )
    for line in summary.lines():
        click.echo(line)


class _PolicyKeysEpilog(click.Command):
    """A command whose help ends with the policy keys and routers, written when the help is
    (importing the policies cost every hpa command 0.03-0.04 s of start-up)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from analyzer.config.policy import policy_help
        from analyzer.config.routers import routing_help

        self.epilog = policy_help() + "\n\n" + routing_help()
        super().format_epilog(ctx, formatter)


@cli.command(cls=_PolicyKeysEpilog)
@db_option
@policy_options
@step_options
@out_file_option("Also export this run's replay_requests (.parquet, .jsonl or .csv).")
@measure_from_option
@name_option("the run (with several policies: NAME · POLICY each)")
@dataset_option
@executor_options
@workers_option
@shard_tokens_option
def replay(
    db_path: str,
    policy_source: str,
    overrides: tuple[str, ...],
    step_gpu: str | None,
    tensor_parallel: int | None,
    out: str | None,
    measure_from: float,
    name: str | None,
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
    from analyzer.pipeline.replay import check_geometry, load_policies, replay_session, run_replay
    from analyzer.report.tables import render
    from analyzer.store.export import check_export_path
    from analyzer.store.runs import check_measure_from, check_name, side_by_side

    check_measure_from(measure_from)
    check_name(name)
    spec = executor_spec(executor, workers, ray_address, shard_tokens=shard_tokens)
    names = [part.strip() for part in policy_source.split(",")]
    if not all(names):
        raise ConfigError(f"--policy {policy_source!r}: an empty name in the list")
    policies = load_policies(names, with_step(overrides, step_gpu, tensor_parallel))
    if out is not None and len(policies) > 1:
        raise ConfigError("--out: exports one run; give a single --policy")
    if out is not None:
        check_export_path(out)
    # every run stored, or none, when the block ends (the store open to readers till then)
    with replay_session(db_path, dataset) as session:
        check_geometry(session, policies)
        for policy, policy_name in zip(policies, names, strict=True):
            run_name = name if name is None or len(names) == 1 else f"{name} · {policy_name}"
            with progress_bar("replay", "requests") as update:
                run_replay(
                    policy,
                    out=out,
                    progress=update,
                    measure_from=measure_from,
                    executor=spec,
                    name=run_name,
                    session=session,
                )
    outcomes = session.outcomes
    for policy, result in zip(policies, outcomes, strict=True):
        _print_replay(policy, result, render, measure_from)
    if len(outcomes) > 1:
        click.echo("\nside by side (measured requests):")
        click.echo(render(side_by_side(names, outcomes)), nl=False)
    if out is not None:
        click.echo(f"wrote {out}")


def _caches_line(policy, num_caches: int) -> str:
    """How many caches the run replayed, and their memory: each pool is one cache's."""
    from analyzer.config.memory import policy_pool_gib

    per = "model revision x replica" if policy.cache_scope == "revision" else "replica"
    gib = policy_pool_gib(policy.model, policy.num_blocks, policy.block_size)
    memory = (
        f": {num_caches} x {gib:,.2f} GiB = {num_caches * gib:,.2f} GiB of cache"
        if gib is not None
        else ""
    )
    return f"caches: {num_caches}, one per {per}{memory}"


def _print_replay(policy, result, render, measure_from: float) -> None:
    from analyzer.pipeline.replay import where_tokens_went

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
    summary = result.summary  # largest first (replay_run_summary.sql): the first are shown
    click.echo(render(summary.slice(0, FAMILY_ROWS).select(cols)), nl=False)
    if summary.num_rows > FAMILY_ROWS:
        rest = summary.slice(FAMILY_ROWS).column("prompt_tokens").to_pylist()
        where = (
            f'hpa query "SELECT * FROM replay_summary WHERE run_id = {result.run_id} '
            'ORDER BY prompt_tokens DESC, prompt_family, model_revision" lists every one'
        )
        click.echo(more_families_line(len(rest), sum(rest), where))
    click.echo(where_tokens_went(result, measure_from))
    click.echo(
        f"run {result.run_id}: {plural(result.num_requests, 'request')} replayed in "
        f"{result.seconds:.2f} s; policy {(result.policy or policy).to_json()}"
    )
    if result.load is not None:
        click.echo(_load_line(result.load))
        click.echo(_steps_line(result.policy or policy))
    else:
        click.echo(_serial_line(result.policy or policy))
    if result.num_caches > 1:
        click.echo(_caches_line(result.policy or policy, result.num_caches))
    host = _host_line(result.policy or policy, result.summary, result.host_waits)
    if host:
        click.echo(host)
    for note in result.notes:
        say(f"note: {note}")
    if result.num_errors:
        click.echo(
            f"warning: {plural(result.num_errors, 'request')} could not be scheduled at all "
            f"(num_blocks {policy.num_blocks} is too small for "
            f"{'it' if result.num_errors == 1 else 'them'}); see "
            f"replay_requests.error",
            err=True,
        )


def _host_line(policy, summary, waits: dict | None) -> str | None:
    """A run with a host KV tier: what it gave back (part of hit_tokens above), what it did
    not, and the loads' waits over the whole run, in hpa compare's words (`waits`:
    store.runs.host_wait_figures) (docs/definitions.md#the-host-kv-tier); None without a
    tier."""
    from analyzer.pipeline.replay import replays_host_tier

    if not replays_host_tier(policy):
        return None
    rows = summary.to_pylist()
    total = {k: sum(r[k] or 0 for r in rows) for k in HOST_SUMS}
    prompt = total["prompt_tokens"] or 1
    waited = total["host_waited_requests"]
    line = (
        f"host KV tier: {total['host_hit_tokens']:,} of the hit tokens loaded from it "
        f"({total['host_hit_tokens'] / prompt:.1%} of prompt tokens); not given back: "
        f"{total['host_evicted_tokens']:,} tokens stored then evicted, "
        f"{never_stored_words(total)}; "
        f"{plural(waited, 'request')} waited for a load"
    )
    if waits is not None and waits["mean_s"] is not None:
        line += f", mean wait {waits['mean_s'] * 1000:,.2f} ms, p99 {waits['p99_s'] * 1000:,.2f} ms"
    return line


HOST_SUMS = (
    "prompt_tokens",
    "host_hit_tokens",
    "host_evicted_tokens",
    "host_never_stored_tokens",
    *(k.column for k in NEVER_STORED),
    "host_waited_requests",
)


def _serial_line(policy) -> str:
    """The caveat of a serial replay: no request waited or met another in flight."""
    hint = (
        "; --set schedule=concurrent replays vLLM's scheduler under load"
        if policy.engine == "vllm"
        else ""
    )
    return (
        "schedule: serial (each request after the previous one finished: no queueing, no "
        f"prefix still in flight, the no-contention bound{hint})"
    )


def _steps_line(policy) -> str:
    """What the simulated times rest on: the step model in force."""
    from analyzer.config.step_models import describe_steps

    return f"steps: {describe_steps(policy)}"


def _load_line(load: dict) -> str:
    """The concurrent schedule's figures in one line (simulated seconds), ending with the
    saturation `hpa plan` names (store.runs.is_saturated) and the queue times that show it."""
    from analyzer.store.runs import saturation_words

    peak = load["held_blocks_peak"]
    held = "" if peak is None else f"; pool blocks in use at an admission: peak {peak:,}"
    if load.get("saturated"):
        held += "; saturated: " + saturation_words(
            load["queue_first_quarter_s"], load["queue_last_quarter_s"]
        )
    return (
        f"load: TTFT p50 {load['ttft_p50_s']:,.3f} s, p90 {load['ttft_p90_s']:,.3f} s, "
        f"p99 {load['ttft_p99_s']:,.3f} s; queue mean {load['queue_mean_s']:,.3f} s, "
        f"p99 {load['queue_p99_s']:,.3f} s; {plural(load['num_preemptions'], 'preemption')} "
        f"of {plural(load['num_preempted_requests'], 'request')} "
        f"({plural(load['recomputed_tokens'], 'token')} recomputed); in flight peak "
        f"{load['in_flight_peak']:,}, mean {load['in_flight_mean']:,.1f}" + held
    )


@cli.command("metrics")
@db_option
@click.option("--run", "run", type=int, default=None, help="Replay run id [default: the latest].")
@out_file_option("Write the text to FILE (e.g. for node_exporter's textfile collector).")
def metrics_cmd(db_path: str, run: int | None, out: str | None) -> None:
    """Print a replay run's counters as Prometheus text (exposition format 0.0.4).

    vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total,
    vllm:prefix_cache_sparse_retention_misses_total, hpa_prefix_cache_lost_tokens_total
    {cause=unshared|routing|granularity|eviction|sparse_retention_never_kept|
    sparse_retention_evicted|spec_decode} and hpa_replay_requests_total, labelled by run,
    prompt_family and model_revision.
    """
    from analyzer.pipeline.metrics import prometheus_metrics, write_metrics

    result = prometheus_metrics(db_path=db_path, run=run)
    if out is None:  # the bytes --out writes (color=True: click strips ESC [ ... on a pipe)
        click.echo(result.text, nl=False, color=True)
    else:
        write_metrics(result.text, out)
        click.echo(f"run {result.run_id}: wrote {out}")


@cli.command("compare")
@db_option
@click.option("--window", default=None, metavar="START..END", help="The current window.")
@baseline_option
@click.option(
    "--run",
    "runs",
    type=int,
    multiple=True,
    help="With windows: the run [default: latest]. Twice (A then B): compare two runs.",
)
@json_format_option("Output format; json is one object with every figure.")
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
    from analyzer.pipeline.compare import compare, largest_families
    from analyzer.report.tables import render

    result = compare(db_path=db_path, window=window, baseline=baseline, runs=runs)
    for warning in result.warnings:
        say(f"warning: {warning}", err=True)
    if fmt == "json":
        click.echo(result.to_json().decode(), nl=False)
        return
    say(result.baseline.describe())
    say(result.current.describe())
    for note in result.notes:
        say(f"note: {note}")
    click.echo("")
    for line in result.traffic_lines():
        say(line)
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
    if result.groups.column("sim_ttft_change_s").null_count < result.groups.num_rows:
        cols += ["baseline_sim_ttft_s", "current_sim_ttft_s", "sim_queue_change_s"]
    groups, causes, hidden, hidden_tokens = largest_families(
        result.groups, result.causes, FAMILY_ROWS
    )
    click.echo(render(groups.select(cols)), nl=False)
    if hidden:
        where = "--format json lists every one"
        say(more_families_line(hidden, hidden_tokens, where, sides=", both sides"))
    click.echo(
        "\nshares of each side's queried tokens; change_points = current - baseline; "
        "contribution_points (to the overall change) = rate_effect_points (the group's own "
        "share moved) + mix_effect_points (its traffic share moved, against the overall share):"
    )
    nonzero = [
        i
        for i, (b, c) in enumerate(
            zip(
                causes.column("baseline_tokens").to_pylist(),
                causes.column("current_tokens").to_pylist(),
                strict=True,
            )
        )
        if b or c
    ]
    click.echo(render(causes.take(nonzero)), nl=False)
    click.echo("")
    for line in result.host_lines():
        say(line)
    for line in result.fit_lines():
        say(line)
    say(result.sentence)
