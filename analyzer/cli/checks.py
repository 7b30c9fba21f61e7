"""Commands that check the model against a live engine: validate, probe."""

from __future__ import annotations

import click

from analyzer.cli.base import (
    cli,
    db_option,
    out_file_option,
    policy_options,
)
from analyzer.cli.text import say
from analyzer.words import plural


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
@out_file_option("Also export the comparison rows (.parquet, .jsonl or .csv).")
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
    import pyarrow as pa

    from analyzer.pipeline.validate import validate
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
    say(f"validation {r.validation_id}: {r.window}")
    per_request = r.table(r.per_request_source)
    if per_request.num_rows:
        click.echo(f"\nper request: replay hit_tokens vs {r.per_request_source}")
        click.echo(render(per_request.drop_columns(["source", "figure"])), nl=False)
    if r.causes is not None:
        click.echo(
            "\nthe per-request error by cause: what the engine did that the replay did not "
            "(error_tokens signed like the error; they add up to it):"
        )
        shown = [n > 0 for n in r.causes.column("requests").to_pylist()]
        click.echo(render(r.causes.filter(pa.array(shown))), nl=False)
        click.echo("\nworst requests (largest |error|, the cause holding most of it):")
        click.echo(render(r.worst), nl=False)
    if r.warning is not None:
        say(r.warning)
    missing = r.requests - r.observed_requests
    if missing:
        click.echo(
            f"not observed: {missing:,} of {plural(r.requests, 'request')} "
            f"{'has' if missing == 1 else 'have'} no cached_tokens "
            "(not compared)"
        )
    counters = r.table("metrics")
    if counters.num_rows:
        click.echo("\nserver counters: replay sums vs /metrics deltas over the same window")
        cols = ["source", "figure", "requests", "observed_tokens", "predicted_tokens"]
        cols += ["error_tokens", "relative_error"]
        click.echo(render(counters.select(cols)), nl=False)
        say(r.metrics_note)
    click.echo(
        "error_tokens = predicted - observed; stored in tables validations and validation_causes"
    )
    if out is not None:
        click.echo(f"wrote {out}")


@cli.command("probe")
@policy_options
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder for probe.jsonl, expected.csv and trace.jsonl (created; not the folders "
    "above it).",
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
    from analyzer.pipeline.probe import send_hint, write_probe
    from analyzer.pipeline.replay import load_policies
    from analyzer.report.tables import render

    [policy] = load_policies([policy_source], list(overrides))
    p = write_probe(policy, out_dir, seed=seed, model=model)
    cols = ["step", "prompt_tokens", "shared_prefix_tokens", "prefix_cache_queries"]
    cols += ["prefix_cache_hits", "prefix_cache_sparse_retention_misses"]
    click.echo(render(p.expected.select(cols)), nl=False)
    click.echo(
        f"{plural(len(p.requests), 'request')} for model {p.model!r} (seed {p.seed}); policy "
        f"{policy.to_json()}"
    )
    click.echo(f"wrote {', '.join(str(f) for f in p.files)}")
    click.echo("send serially to a fresh server (one engine, no other traffic), e.g.:")
    click.echo(f"  {send_hint(out_dir)}")
