"""The `hpa` group, its shared options and helpers; the commands live beside this module."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

import click

from analyzer import interrupts
from analyzer.cli.faults import environment_error
from analyzer.errors import AnalyzerError
from analyzer.store import DEFAULT_DB

# `hpa compare` and `hpa report --window`: the window a change is measured against.
baseline_option = click.option(
    "--baseline", default=None, metavar="START..END", help="The baseline window."
)

db_option = click.option(
    "--db",
    "db_path",
    default=DEFAULT_DB,
    show_default=True,
    type=click.Path(dir_okay=False),
    help="DuckDB file holding the tables.",
)


def json_format_option(help: str):
    """`--format table|json` (as `fmt`), table by default; `help` says what json prints."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help=help,
    )


def out_file_option(help: str):
    """An optional `--out FILE` (a file path, not a folder; None when not given)."""
    return click.option("--out", type=click.Path(dir_okay=False), default=None, help=help)


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
        help="A policy file (.json/.toml) or preset name (analyzer/schemas/policies/).",
    )(command)


def step_options(command):
    """--gpu and --tensor-parallel: the step model's GPU (replay, sweep): shortcuts of
    `--set gpu=NAME --set tensor_parallel=N` (the roofline step from the model and the GPU)."""
    command = click.option(
        "--tensor-parallel",
        "tensor_parallel",
        default=None,
        type=click.IntRange(min=1),
        help="GPUs a replica is split over (with --gpu) [default: 1].",
    )(command)
    return click.option(
        "--gpu",
        "step_gpu",
        default=None,
        metavar="NAME",
        help="Price each step of a concurrent replay on this GPU from the model's figures "
        "(the roofline; docs/latency.md) [default: none: step_base_ms + step_token_us per "
        "token].",
    )(command)


def with_step(overrides, gpu: str | None, tensor_parallel: int | None) -> list[str]:
    """The --set overrides with --gpu and --tensor-parallel appended as policy keys."""
    out = list(overrides)
    if gpu is not None:
        out.append(f"gpu={gpu}")
    if tensor_parallel is not None:
        out.append(f"tensor_parallel={tensor_parallel}")
    return out


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


def measure_from_option(command):
    return click.option(
        "--measure-from",
        "measure_from",
        type=float,
        default=0.0,
        show_default=True,
        metavar="FRACTION",
        help="Warm-up exclusion: replay every request but measure only those with arrival "
        "index >= floor(FRACTION * n) (0 <= FRACTION < 1).",
    )(command)


def name_option(what: str):
    def decorate(command):
        return click.option(
            "--name",
            default=None,
            metavar="NAME",
            help=f"What to call {what} in the report (stored); default: its engine and "
            "what its policy changes.",
        )(command)

    return decorate


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


def executor_spec(
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


# The commands that write files and never the store: a signal's line says what of them was
# written, not stored (`interrupts.message`).
FILE_COMMANDS = frozenset({"synth", "report", "metrics", "calibrate", "probe"})


class _Group(click.Group):
    """Turns library errors, and errors of the machine (a full disk, ...), into one-line
    messages with an exit code."""

    def make_context(self, info_name, args, parent=None, **extra):
        """The group's own options (`hpa --bogus`): a usage error in one line, as a
        command's (`invoke`)."""
        given = list(args)  # click's parser consumes `args`
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            if "--debug" in given or _help_asked(exc):
                raise
            _usage_error(exc)

    def invoke(self, ctx: click.Context):
        interrupts.reset()
        try:
            return super().invoke(ctx)
        except BaseException as exc:
            interrupts.finish()  # a signal from now on changes nothing
            debug = bool(ctx.obj and ctx.obj.get("debug"))  # set by `cli`, inside invoke
            signum = interrupts.stopped_by()  # whatever DuckDB made of the signal's Stopped
            files_only = ctx.invoked_subcommand in FILE_COMMANDS
            if signum is not None and not debug:
                _stopped(signum, files_only)
            if isinstance(exc, AnalyzerError) and not debug:
                click.echo(f"Error: {exc}", err=True)
                sys.exit(exc.exit_code)
            if isinstance(exc, click.UsageError) and not debug and not _help_asked(exc):
                _usage_error(exc)
            message = (
                environment_error(exc, files_only=files_only)
                if isinstance(exc, Exception) and not debug
                else None
            )
            if message is None:
                raise
            click.echo(f"Error: {message}", err=True)
            sys.exit(1)
        finally:
            interrupts.finish()


def _help_asked(exc: click.UsageError) -> bool:
    """A group given no command (`hpa model`): click shows its help, as it should."""
    return type(exc).__name__ == "NoArgsIsHelpError"


def _usage_error(exc: click.UsageError) -> None:
    """A bad option or argument (click's: a value out of range, a folder given as a file,
    a missing option) as one line like every other error, exit code 2: click printed the
    usage line, a hint and a blank line before it."""
    where = exc.ctx.command_path if exc.ctx is not None else "hpa"
    click.echo(f"Error: {exc.format_message()} ('{where} --help' for help)", err=True)
    sys.exit(exc.exit_code)


@click.group(cls=_Group)
@click.version_option(package_name="hybrid-prefix-analyzer")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Find the prefix-cache hits a hybrid model lost, and why."""
    ctx.ensure_object(dict)["debug"] = debug


# On a pipe or a log (not a terminal), progress is lines on stderr, flushed: none within
# PROGRESS_QUIET_S of the start (a quick command prints none); after, a line at most every
# PROGRESS_LINE_S from the command's own counts, and at least every PROGRESS_HEARTBEAT_S
# (the last count again with the time so far, from a thread, where one step takes long).
PROGRESS_QUIET_S = 10.0
PROGRESS_LINE_S = 5.0
PROGRESS_HEARTBEAT_S = 5.0

# Held while a progress line is written, and across a fork (the process pool forks): a
# worker never starts with stderr's lock held by a thread it does not have.
_ECHO_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_ECHO_LOCK.acquire,
        after_in_parent=_ECHO_LOCK.release,
        after_in_child=_ECHO_LOCK.release,
    )


class _Lines:
    """Progress lines of one command on a pipe or a log (see PROGRESS_QUIET_S)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.started = self.last = time.monotonic()
        # the last count as a heartbeat line, from the time so far (None: no count yet)
        self.beat: Callable[[float], str] | None = None
        self.shown = False  # whether a line was printed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def due(self, now: float, every: float) -> bool:
        return now - self.started >= PROGRESS_QUIET_S and now - self.last >= every

    def echo(self, text: str, now: float) -> None:
        with _ECHO_LOCK:
            self.last, self.shown = now, True
            click.echo(text, err=True)
            sys.stderr.flush()

    def update(
        self, text: str, beat: Callable[[float], str] | None = None, force: bool = False
    ) -> None:
        """The command's count now as `text`, printed when a line is due (or `force`: at
        the end of a count that printed before); `beat(seconds so far)`: the heartbeat's
        line while no other comes (default: `text, N s so far`)."""
        self.beat = beat or (lambda elapsed: f"{text}, {elapsed:,.0f} s so far")
        now = time.monotonic()
        if self.due(now, PROGRESS_LINE_S) or (force and self.shown):
            self.echo(text, now)

    def _beat(self) -> None:
        while not self._stop.wait(min(PROGRESS_HEARTBEAT_S, 1.0)):
            now = time.monotonic()
            if self.due(now, PROGRESS_HEARTBEAT_S):
                elapsed, beat = now - self.started, self.beat
                self.echo(beat(elapsed) if beat else f"{self.label}: {elapsed:,.0f} s so far", now)

    def __enter__(self) -> _Lines:
        self._thread = threading.Thread(target=self._beat, name="hpa-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@contextmanager
def heartbeat(label: str):
    """A command without counts of its own: on a pipe or a log, `label: N s so far` every
    PROGRESS_HEARTBEAT_S once PROGRESS_QUIET_S have passed; nothing on a terminal."""
    if sys.stderr.isatty():
        yield
        return
    with _Lines(label):
        yield


def _progress_lines(lines: _Lines, unit: str):
    """update(done, total[, where]) for `lines`: `label: done of total unit (where)` (bytes
    shown in MiB), the last line at the end of a count that printed before."""

    def show(n: int) -> str:
        return f"{n / 2**20:,.1f}" if unit == "MiB" else f"{n:,}"

    def update(done: int, total: int, where: str = "") -> None:
        at = f" ({where})" if where else ""
        text = f"{lines.label}: {show(done)} of {show(total)} {unit}{at}"
        lines.update(text, force=done >= total)

    return update


@contextmanager
def progress_bar(label: str, unit: str):
    """Yields update(done, total) drawing a progress bar on a terminal; on a pipe or a log,
    lines (`_Lines`: `label: done of total unit`, `unit` naming what is counted: "MiB" for
    bytes); the bar is closed on exit."""
    if not sys.stderr.isatty():
        with _Lines(label) as lines:
            yield _progress_lines(lines, unit)
        return
    state: dict = {}

    def update(done: int, total: int, where: str = "") -> None:  # `where`: the bar's own
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
def counter(label: str, unit: str):
    """Yields update(n, what, end=False) showing a running count of steps of unknown number,
    and what the command is doing: redrawn in place on a terminal; on a pipe or a log, lines
    (`_Lines`) with the time so far. `end`: the final count (the command's own, as its answer
    says it), printed as the last line wherever a line was printed before."""
    started = time.monotonic()
    if not sys.stderr.isatty():
        with _Lines(label) as lines:

            def line(n: int, what: str = "", end: bool = False) -> None:
                doing = f": {what}" if what else ""

                def text(elapsed: float) -> str:
                    return f"{label}: {n:,} {unit}, {elapsed:,.0f} s{doing}"

                lines.update(text(time.monotonic() - started), text, force=end)

            yield line
        return
    shown = [False]

    def update(n: int, what: str = "", end: bool = False) -> None:  # end: redrawn as any
        shown[0] = True
        doing = f": {what}" if what else ""
        text = f"{label}: {n:,} {unit}, {time.monotonic() - started:,.0f} s{doing}"
        width = shutil.get_terminal_size().columns - 1  # one line, redrawn whole
        click.echo(f"\r{text[:width]:<{width}}", nl=False, err=True)

    try:
        yield update
    finally:
        if shown[0]:
            click.echo(err=True)


def main() -> None:
    interrupts.arm()
    try:
        cli(prog_name="hpa")
    except interrupts.Stopped as stop:  # before the command began
        interrupts.finish()
        _stopped(stop.signum)
    finally:
        interrupts.disarm()


def _stopped(signum: int, files_only: bool = False) -> None:
    """End a command a signal stopped: one line saying what the store holds of it (with
    `files_only`: what of its files is written), and 128 + the signal's number (143 for
    SIGTERM, 130 for Ctrl-C)."""
    click.echo(f"Error: {interrupts.message(signum, files_only=files_only)}", err=True)
    sys.exit(128 + signum)
