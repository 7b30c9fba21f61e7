"""Errors of the machine, not of the input or the code, as one line each: a store file that
is damaged, memory exhausted (in which stage of the command), a disk or a folder that will
not be written; each line says what the command had stored (`analyzer.interrupts`)."""

from __future__ import annotations

import errno

from analyzer import interrupts

# The machine, not the input or the code: a full disk, a read-only or vanished file, no
# memory. What they interrupted was rolled back (every write is one transaction).
_ENVIRONMENT_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EFBIG,
    errno.EROFS,
    errno.EACCES,
    errno.EIO,
    errno.ENAMETOOLONG,  # a path the user gave (--db, an input) past the system's limits
    errno.ELOOP,
}


def environment_error(exc: BaseException, *, files_only: bool = False) -> str | None:
    """The one-line message of an error the machine caused, or None for any other: a store
    file that is damaged (named), memory exhausted (and in which stage of the command), a
    disk or a folder that will not be written; each says what the command stored and wrote
    (`files_only`: a command that writes files and never the store)."""
    import duckdb

    from analyzer.store.faults import first_line, memory_exhausted, opened_stores
    from analyzer.store.locks import damage, damaged_store

    stored = _stored_note(files_only)
    if (damaged := damage(exc)) is not None:
        return damaged_store(opened_stores()[-1] if opened_stores() else None, damaged, stored)
    if memory_exhausted(exc):
        stage, why = _failed_stage(exc)
        return f"out of memory while {stage} ({why}); {stored}"
    if isinstance(exc, OSError) and exc.errno in _ENVIRONMENT_ERRNOS:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}; {stored}"
    # A commit that fails is the machine's doing: a full disk, a folder whose write-ahead log
    # cannot be made (read-only, immutable, no permission)
    if isinstance(exc, duckdb.IOException) or (
        isinstance(exc, duckdb.TransactionException)
        and ("Could not write" in str(exc) or "Failed to commit" in str(exc))
    ):
        return f"the database could not be written ({first_line(exc)}); {stored}"
    return None


def _stored_note(files_only: bool) -> str:
    """What this command's commits stored and its writers wrote whole before the error
    (`interrupts.landed`, `interrupts.written`)."""
    stored, files, kept = interrupts.so_far(files_only=files_only)
    done = [f"stored before it: {stored}"] if stored else []
    done += [f"written before it: {files}"] if files else []
    if not done:
        return f"nothing was {kept}"
    return f"{'; '.join(done)} (whole); nothing else was {kept}"


# Where in a command an error arose, by the module of its innermost frame that says (the
# first prefix that matches): what an out-of-memory message names.
_STAGES = (
    ("analyzer.store.ingest", "storing the input's records"),
    ("analyzer.traces", "reading the input file"),
    ("analyzer.store.runs", "storing the replay run"),
    ("analyzer.store.matches", "storing the prefix matches"),
    ("analyzer.store.sweeps", "storing the sweep"),
    ("analyzer.store.export", "writing --out"),
    ("analyzer.prefixes", "matching shared prefixes"),
    ("analyzer.access.shared_prefixes", "matching shared prefixes"),
    ("analyzer.access", "loading the trace from the store"),
    ("analyzer.store.sequences", "loading the trace from the store"),
    ("analyzer.store.tokens", "loading the trace from the store"),
    ("analyzer.sim", "replaying"),
    ("analyzer.executors", "running the workers"),
    ("analyzer.metrics", "computing the metrics"),
    ("analyzer.report", "building the report"),
    ("analyzer.pipeline.plan", "searching the plan"),
    ("analyzer.pipeline.sweep", "sweeping"),
    ("analyzer.pipeline.sweep_points", "sweeping"),
    ("analyzer.pipeline.sweep_dataset", "sweeping"),
    ("analyzer.pipeline.match", "matching shared prefixes"),
    ("analyzer.pipeline.replay", "replaying"),
    ("analyzer.pipeline", "running the command"),
)
_OPENING = {"connect", "open_reader", "_attach", "_ensure_schema", "_read_only_open"}


def _failed_stage(exc: BaseException) -> tuple[str, str]:
    """(the stage of the command `exc` arose in, its first line), from the traceback of the
    error behind `exc` that ran out of memory."""
    from analyzer.store.faults import errors_behind, first_line, memory_exhausted

    behind = [e for e in errors_behind(exc) if memory_exhausted(e)]
    cause = behind[-1] if behind else exc
    frames = []
    tb = cause.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        module = str(frame.f_globals.get("__name__", ""))
        if module == "analyzer.store.db" and frame.f_code.co_name in _OPENING:
            return "opening the store", first_line(cause)
        for prefix, stage in _STAGES:
            if module == prefix or module.startswith(prefix + "."):
                return stage, first_line(cause)
    return "running the command", first_line(cause)
