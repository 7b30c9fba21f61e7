"""Commands that bring traces in and look at them: ingest, query, synth, demo."""

from __future__ import annotations

import sys

import click

from analyzer.cli.base import (
    cli,
    db_option,
    out_file_option,
    progress_bar,
)
from analyzer.traces.formats import FORMATS
from analyzer.words import plural


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
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
@click.option(
    "--reject-truncated",
    is_flag=True,
    help="Reject a server log's prompts that may be cut (vLLM's --max-log-len) instead of "
    "storing them flagged (requests.log_cut_tokens).",
)
@click.option(
    "--tokenizer",
    metavar="PATH",
    default=None,
    help="The served model's folder (tokenizer.json, tokenizer_config.json; never downloaded): "
    "chat and completion logs (format chat) are tokenized with it as the server did.",
)
def ingest(
    files: tuple[str, ...],
    db_path: str,
    fmt: str,
    allow_rejects: bool,
    tokenizer: str | None,
    reject_truncated: bool,
) -> None:
    """Store request records from FILES in the database; list every rejected record.
    A directory stands for the files directly in it, by name.

    Exit status: 0 when every record was stored (or --allow-rejects), 1 when some were
    rejected or no file held a record, 2 when a file is missing or cannot be parsed at all.
    """
    from analyzer.store.caveats import timestamp_caveat
    from analyzer.store.ingest import ingest as ingest_files

    with progress_bar("ingest", "MiB") as update:
        result = ingest_files(
            files,
            db_path=db_path,
            fmt=fmt,
            progress=update,
            tokenizer=tokenizer,
            reject_truncated=reject_truncated,
        )
    stored_by_format: dict[str, int] = {}  # a format's caveat once per ingest, in order
    empty = [s.path for s in result.sources if s.duplicate_of is None and not s.num_read
             and not s.num_skipped]  # fmt: skip
    for src in result.sources:
        if src.duplicate_of is not None:
            click.echo(
                f"{src.path}: identical to source {src.duplicate_of} "
                f"(sha256 {src.sha256[:12]}), nothing added"
            )
            continue
        skipped = f"; {plural(src.num_skipped, 'other line')} skipped" if src.num_skipped else ""
        click.echo(
            f"{src.path}: read {src.num_read:,} = stored {src.num_stored:,} + "
            f"rejected {src.num_rejected:,} ({plural(src.num_prompt_tokens, 'prompt token')}"
            f"{skipped})"
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
        if (why := src.nothing_stored()) is not None:
            click.echo(f"  {why}", err=True)
        if (cut := src.cut_said()) is not None:
            click.echo(f"warning: {cut}", err=True)
        if src.path in empty:
            click.echo(f"warning: {src.path}: no records (an empty file)", err=True)
        if src.num_stored:
            stored_by_format[src.format] = stored_by_format.get(src.format, 0) + src.num_stored
    for fmt, num_stored in stored_by_format.items():
        if (caveat := timestamp_caveat(fmt, num_stored)) is not None:
            click.echo(f"note: {caveat}")
    for path, why in result.skipped_files:
        click.echo(f"skipped {path}: {why}")
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if len(result.sources) > 1:
        click.echo(
            f"total: read {result.num_read:,} = stored {result.num_stored:,} + "
            f"rejected {result.num_rejected:,}"
        )
    if result.num_rejected and not allow_rejects:
        sys.exit(1)
    if empty and not result.num_read and all(s.duplicate_of is None for s in result.sources):
        click.echo("ingest: no file held a record; nothing stored", err=True)
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
@click.option("--write", is_flag=True, help="Let the statement change the database.")
@click.option(
    "--files",
    is_flag=True,
    help="Let the statement read and write files (COPY ... TO, read_csv, ATTACH, INSTALL).",
)
@out_file_option("Write the rows to this file instead (.parquet, .jsonl or .csv).")
def query(sql: str, db_path: str, fmt: str, write: bool, files: bool, out: str | None) -> None:
    """Run SQL over the stored tables (requests, rejects, sources, ...) and print the result.

    The database is opened read-only and the statement can reach no file unless --write or
    --files says otherwise. The table shows control characters escaped (\\x1b); CSV and JSON
    hold the stored text, as --out does; CSV cells that start like a spreadsheet formula get
    a leading apostrophe."""
    from analyzer.report.tables import render
    from analyzer.store.export import check_export_path, write_rows
    from analyzer.store.query import run_query

    if out is not None:
        check_export_path(out)  # before the query runs
    table = run_query(sql, db_path=db_path, write=write, files=files)
    if out is not None:
        count = write_rows(table, out)
        click.echo(f"wrote {count:,} row{'' if count == 1 else 's'} to {out}")
        return
    # The same bytes on a terminal and a pipe; color=True: click would otherwise strip
    # escape sequences from piped data silently (docs/commands.md#what-is-printed).
    click.echo(render(table, fmt, spreadsheet_safe=True, precise=True), nl=False, color=True)


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
    from analyzer.store.export import check_out_folder
    from analyzer.traces.synth import generate, parse_params, write_jsonl

    check_out_folder(out, option="")
    values = parse_params(scenario, params)
    if num_requests is not None:
        values["num_requests"] = num_requests
    records = generate(scenario, seed=seed, block_size=block_size, arrays=True, **values)
    stats = write_jsonl(records, out)
    click.echo(
        f"synth: {plural(stats.records, 'record')}, {plural(stats.prompt_tokens, 'prompt token')} "
        f"-> {out}"
    )


@cli.command()
@click.option(
    "--out",
    "out_dir",
    default="build/demo",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder for the demo databases (replaced; one holding files no demo wrote is refused).",
)
@click.option(
    "--samples",
    "samples_dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Folder of sample traces [default: sample_traces/ here or above, or beside the "
    "package; else they are synthesized into OUT/samples, the same bytes].",
)
def demo(out_dir: str, samples_dir: str | None) -> None:
    """Run the whole pipeline on the bundled sample traces."""
    from analyzer.pipeline.demo import run_demo
    from analyzer.report.tables import render

    with progress_bar("demo", "stages") as update:
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
    click.echo("\nworked examples (hit/sparse-retention-miss tokens per request):")
    click.echo(render(result.cases), nl=False)
    click.echo(
        f"\ncapacity sweeps: {plural(result.num_sweep_points, 'point')} (tables sweeps, "
        "sweep_points)"
    )
    click.echo(
        f'database: {result.db_path}  (try: hpa query "SELECT * FROM '
        f'replay_summary" --db {result.db_path})'
    )
    click.echo(f"report: {result.report_path}")
