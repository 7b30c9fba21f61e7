"""Ingest: trace files into the `requests`, `sources` and `rejects` tables.

Guarantees (docs/definitions.md#ingest-guarantees): for every file, records read = stored +
rejected; a file already ingested (same sha256) adds nothing; a command lands whole or not at all:
one that fails midway leaves nothing behind (its rows are removed, and a killed one is
cleaned up by the next command that opens the store). Batches are committed as they go
so that memory does not grow with the file.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from analyzer import interrupts
from analyzer.errors import AnalyzerError, ConfigError, InputFileError
from analyzer.store.caveats import block_size_caveat
from analyzer.store.db import (
    DEFAULT_DB,
    connect,
    load_sql,
    remove_store,
    stores,
    transaction,
)
from analyzer.store.faults import memory_exhausted
from analyzer.store.ingest_files import (
    check_name,
    check_readable,
    damage,
    listed_files,
    not_a_file,
    sha256_later,
)
from analyzer.store.write_units import prefetched, write_units
from analyzer.traces.adapters import chat
from analyzer.traces.batches import Batch, Reject, SourceInfo, rejects_table
from analyzer.traces.io import CountingReader, open_binary
from analyzer.traces.jsonlines import max_line_bytes
from analyzer.traces.readers import (
    READERS,
    SOURCE_INFO,
    detect_format,
)
from analyzer.traces.records import MISSING_IDS, NO_IDS_WHY
from analyzer.words import plural

# (bytes read so far, total bytes) of the whole command, and which file ('file 3 of 710';
# '' for one file)
Progress = Callable[[int, int, str], None]
FileProgress = Callable[[int, int], None]  # (bytes read so far, total bytes) of one file


@dataclass(frozen=True)
class SourceResult:
    """What one file added; `duplicate_of` is set when an identical file was stored before."""

    path: str
    sha256: str
    format: str
    source_id: int | None = None
    num_read: int = 0
    num_stored: int = 0
    num_rejected: int = 0
    num_prompt_tokens: int = 0
    duplicate_of: int | None = None
    num_skipped: int = 0  # input lines that are not records (server logs)
    rejects: tuple[Reject, ...] = ()  # the first few, for the CLI to show
    num_duplicates: int = 0  # rejects whose request id was stored before
    # Prompts of exactly cut_at_tokens ids in a log that cuts its lists there (vLLM's
    # --max-log-len): stored with requests.log_cut_tokens set, or rejected (cut_rejected).
    num_cut: int = 0
    cut_at_tokens: int | None = None
    cut_rejected: bool = False

    def cut_said(self) -> str | None:
        """The line for prompts the log may have cut, or None (docs/traces.md#cut-logs)."""
        if not self.num_cut:
            return None
        n, cut = self.num_cut, self.cut_at_tokens
        prompts = plural(n, "prompt")
        if self.cut_rejected:
            return (
                f"{self.path}: {prompts} of exactly {cut:,} tokens rejected: the log cuts "
                f"its token lists at {cut:,} (vLLM's --max-log-len), so they may be longer"
            )
        return (
            f"{self.path}: {prompts} may be cut at {cut:,} tokens (the log cuts its token "
            f"lists there: vLLM's --max-log-len): their shared prefixes are a lower bound; "
            f"stored with log_cut_tokens = {cut:,} (--reject-truncated rejects them)"
        )

    def nothing_stored(self) -> str | None:
        """Why a file that held records stored none of them, one line (None when it stored
        some): every record a duplicate of one stored before, or a question of its format."""
        if not self.num_read or self.num_stored or (self.cut_rejected and self.num_cut):
            return None  # (prompts rejected as cut: cut_said says so)
        if self.num_duplicates == self.num_read:
            return (
                f"every one of its {self.num_read:,} records duplicates a request stored "
                "before (same request_id): the file adds nothing"
            )
        if self.num_duplicates:
            return (
                f"none of its records was stored: {self.num_duplicates:,} duplicate requests "
                f"stored before, {self.num_read - self.num_duplicates:,} rejected otherwise"
            )
        return (
            f"none of its records is a request in format {self.format}: is it a trace of "
            f"another format (--format {', '.join(READERS)}), or no trace at all?"
        )


@dataclass(frozen=True)
class IngestResult:
    sources: tuple[SourceResult, ...]
    # Files of a directory given that are left out, not read: (path, why).
    skipped_files: tuple[tuple[str, str], ...] = ()
    # What the store now holds that a user should know before replaying it (one line each).
    warnings: tuple[str, ...] = ()

    @property
    def num_read(self) -> int:
        return sum(s.num_read for s in self.sources)

    @property
    def num_stored(self) -> int:
        return sum(s.num_stored for s in self.sources)

    @property
    def num_rejected(self) -> int:
        return sum(s.num_rejected for s in self.sources)


@dataclass
class _Tally:
    """Running counts of one file, and where each request id was first seen."""

    source_id: int
    path: str
    first_seen: dict[str, tuple[int, int]]
    sources: dict[int, str]
    num_read: int = 0
    num_stored: int = 0
    num_prompt_tokens: int = 0
    rejects: list[Reject] = field(default_factory=list)
    num_rejected: int = 0
    num_undecodable: int = 0  # rejects that were not a JSON object at all
    num_no_ids: int = 0  # rejects of records with neither token ids nor block hashes
    num_duplicates: int = 0  # rejects whose request id was stored before
    num_skipped: int = 0  # lines that are not records (server logs)
    block_sizes: set[int] = field(default_factory=set)  # up to 2 distinct stored sizes
    reject_cut: bool = False  # --reject-truncated: reject the prompts the log may have cut
    cut_at: int | None = None  # the log's verdict (Batch.cut_at_tokens)
    num_cut: int = 0  # its prompts of exactly cut_at ids, flagged or rejected


MAX_REJECTS_KEPT = 20
INGEST_MEMORY_LIMIT = "512MB"
_UNDECODABLE = ("malformed JSON", "expected a JSON object")


def ingest(
    paths: Iterable[str | Path],
    *,
    db_path: str | Path = DEFAULT_DB,
    fmt: str = "auto",
    progress: Progress | None = None,
    reject_truncated: bool = False,
    tokenizer: str | None = None,
) -> IngestResult:
    """Store every record of `paths` or list it as rejected; files in the order given.

    Raises:
        InputFileError: a file is missing, unreadable, or not parseable at all (exit 2).
        ConfigError: an unknown format, HPA_MAX_LINE_MIB not a number >= 1, or no tokenizer.

    `reject_truncated`: reject a server log's prompts that may be cut (vLLM's --max-log-len:
    `SourceResult.cut_said`) rather than store them flagged.
    """
    _check_format(fmt)
    text = chat.tokenizer_at(tokenizer)
    max_line_bytes()  # a bad HPA_MAX_LINE_MIB is an error before anything is read
    listed = [listed_files(Path(p)) for p in paths]
    paths = [f for files, _ in listed for f in files]
    skipped = tuple((str(f), why) for _, left in listed for f, why in left)
    if not paths:
        raise InputFileError(f"nothing to ingest: {'; '.join(f'{f}: {w}' for f, w in skipped)}")
    for path in paths:
        if not path.is_file():
            raise InputFileError(f"{path}: {not_a_file(path)}")
        check_name(path)
    store = Path(db_path)
    created = not store.exists() or store.stat().st_size == 0  # empty: no store (connect)
    # DuckDB caches written blocks up to its memory limit (80% of RAM by default);
    # capping it keeps ingest memory flat however large the file is.
    con = connect(db_path, memory_limit=INGEST_MEMORY_LIMIT, config={"threads": _db_threads()})
    results: list[SourceResult] = []
    try:
        try:
            _ingest_files(con, paths, fmt, text, progress, results, reject_truncated)
            stored = any(r.num_stored for r in results)
            mixed = block_size_caveat(con) if stored else None
        finally:
            con.close()  # before a failed first store is removed: closing writes the file
    except BaseException as exc:
        if created and not _closed(exc, paths):
            remove_store(store)  # a failed first ingest leaves no database behind
        raise
    warnings = ((mixed,) if mixed else ()) + chat.unused(text, [r.format for r in results])
    return IngestResult(tuple(results), skipped, warnings)


def _landing(paths: list[Path]) -> str:
    """What an ingest of `paths` stores, as a command stopped by a signal names it."""
    named = ", ".join(p.name for p in paths) if len(paths) <= 3 else f"{len(paths)} files"
    return f"the ingest of {named}"


def _closed(exc: BaseException, paths: list[Path]) -> bool:
    """Whether `exc` is a signal that came as the ingest of `paths` closed: its commit
    held the signal back and has landed the files."""
    return isinstance(exc, interrupts.Stopped) and _landing(paths) in exc.stored


def _db_threads() -> int:
    """DuckDB's threads while ingesting: every core but the one the reader's thread parses
    on (store.write_units.prefetched); on 2 cores, 70 M tokens took 5.2 s, not 5.65 s."""
    return max(1, (os.cpu_count() or 2) - 1)


def _whole_progress(paths: list[Path], progress: Progress | None) -> list:
    """Per file, its progress as the whole command's: bytes of every file so far, of all of
    them (a folder of small files then counts up once, not from 0 at each file)."""
    if progress is None:
        return [None] * len(paths)
    sizes = [p.stat().st_size for p in paths]
    total, before = sum(sizes), [sum(sizes[:i]) for i in range(len(sizes))]
    n = len(paths)
    which = [f"file {k + 1:,} of {n:,}" if n > 1 else "" for k in range(n)]
    return [
        lambda done, _size, base=base, where=where: progress(base + done, total, where)
        for base, where in zip(before, which, strict=True)
    ]


def _ingest_files(
    con, paths: list[Path], fmt: str, text, progress, results: list, reject_cut=False
) -> None:
    """Ingest `paths` as one command: all of them land, or none (an error, Ctrl-C, or a
    kill: the next connect forgets what a command that did not end stored). Batches commit
    as they go, so memory stays flat; the files count only once the command closes."""
    known = _known_sources(con)  # connect() already undid what a killed ingest left
    first_seen = {
        rid: (sid, line) for rid, sid, line in con.execute(load_sql("ingest_first_seen")).fetchall()
    }
    first = con.execute(load_sql("ingest_next_source_id")).fetchall()[0][0]
    con.execute(load_sql("ingest_open"), {"first_source_id": first})
    replaced: list[int] = []  # all-rejected earlier ingests read again: dropped at the end
    try:
        for path, file_progress in zip(paths, _whole_progress(paths, progress), strict=True):
            results.append(
                _ingest_file(
                    con, path, fmt, text, known, first_seen, file_progress, replaced, reject_cut
                )
            )
        with transaction(con):
            for source_id in replaced:
                con.execute(load_sql("ingest_forget_rejects"), {"source_id": source_id})
                con.execute(load_sql("ingest_delete_source"), {"source_id": source_id})
            if any(r.num_stored for r in results):
                con.execute(load_sql("arrival_order"))
            con.execute(load_sql("ingest_close"))
            stores(con, _landing(paths))
    except BaseException as exc:
        if _closed(exc, paths):
            raise  # a signal that waited for the close's commit: the files are stored
        try:
            with transaction(con):
                con.execute(load_sql("ingest_forget_command"))
        except duckdb.Error:
            pass  # a full disk refuses even this; the next connect forgets the command
        landed = [r.path for r in results if r.num_stored]
        if isinstance(exc, AnalyzerError) and landed:
            raise type(exc)(
                f"{exc}; nothing of this ingest was stored, {', '.join(landed)} included "
                "(a command lands whole or not at all)"
            ) from None
        raise


def _check_format(fmt: str) -> None:

    if fmt != "auto" and fmt not in READERS:
        raise ConfigError(f"unknown format {fmt!r}; known: auto, {', '.join(READERS)}")


def _known_sources(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[int, str, str, int]]:
    """sha256 -> (source_id, path, format, requests stored) of every ingested file."""
    rows = con.execute(load_sql("ingest_known_sources")).fetchall()
    return {sha: (sid, p, fmt, stored) for sha, sid, p, fmt, stored in rows}


def _read_again(known: dict, sha: str, fmt: str, replaced: list[int]) -> bool:
    """Whether a file ingested before is read again: its earlier ingest, under another
    format, stored nothing (all rejected). That ingest's rejects and sources row go when
    the command ends (`replaced`)."""
    source_id, _, old_format, stored = known[sha]
    if stored or old_format == fmt:
        return False
    replaced.append(source_id)
    del known[sha]
    return True


def _ingest_file(
    con, path, fmt, text, known, first_seen, progress, replaced, reject_cut=False
) -> SourceResult:
    check_readable(path)
    digest = sha256_later(path)
    fmt = detect_format(path) if fmt == "auto" else fmt
    if known:  # the file may be one stored already: know that before reading it
        sha = digest()
        if sha in known and not _read_again(known, sha, fmt, replaced):
            return SourceResult(str(path), sha, fmt, duplicate_of=known[sha][0])
    source_id = con.execute(load_sql("ingest_next_source_id")).fetchall()[0][0]
    sources = {sid: p for sid, p, _, _ in known.values()}
    sources[source_id] = str(path)
    # the command's own map (a file that fails fails the command, which stores nothing):
    # a copy a file, merged back, was quadratic in files, a ChainMap slower a record
    tally = _Tally(source_id, str(path), first_seen, sources, reject_cut=reject_cut)
    _read_into(con, path, chat.reader_or(READERS[fmt], fmt, text), tally, progress)
    _check_parseable(path, fmt, tally)
    sha = digest()
    # The sources row is written last: it marks the file as read whole.
    info = SOURCE_INFO.get(fmt, SourceInfo())
    row = {
        "source_id": source_id,
        "path": str(path),
        "sha256": sha,
        "format": fmt,
        "num_read": tally.num_read,
        "num_stored": tally.num_stored,
        "num_rejected": tally.num_rejected,
        "num_prompt_tokens": tally.num_prompt_tokens,
        "block_size": info.block_size_tokens or _single(tally.block_sizes),
        "provenance": info.provenance,
        "num_skipped": tally.num_skipped,
        **chat.provenance(fmt, text),
    }
    con.execute(load_sql("ingest_insert_source"), row)
    known[sha] = (source_id, str(path), fmt, tally.num_stored)
    return SourceResult(
        str(path),
        sha,
        fmt,
        source_id,
        tally.num_read,
        tally.num_stored,
        tally.num_rejected,
        tally.num_prompt_tokens,
        rejects=tuple(tally.rejects),
        num_skipped=tally.num_skipped,
        num_duplicates=tally.num_duplicates,
        num_cut=tally.num_cut,
        cut_at_tokens=tally.cut_at,
        cut_rejected=tally.reject_cut,
    )


def _read_into(
    con, path: Path, read: Callable, tally: _Tally, progress: FileProgress | None
) -> None:
    total = path.stat().st_size
    with open(path, "rb") as raw:
        counter = CountingReader(raw)
        report = (lambda: progress(counter.num_bytes, total)) if progress else (lambda: None)
        stream = open_binary(path, counter)
        units = prefetched(write_units(read(path, stream, report)))
        try:
            with closing(units):  # the reader's thread stops before the file closes
                for batch in units:
                    _store_batch(con, batch, tally)
        except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
            if memory_exhausted(exc):  # the machine's, not the file's (cli/faults.py)
                raise
            raise InputFileError(f"{path}: cannot be read{damage(path)} ({exc})") from None
        except Exception as exc:
            if type(exc).__module__.startswith(("zstd", "zstandard")):  # zstandard.backend_c
                raise InputFileError(f"{path}: corrupt zstd stream{damage(path)} ({exc})") from None
            raise
        if progress:
            progress(total, total)


def _store_batch(con, batch: Batch, tally: _Tally) -> None:
    rows, rejects = _drop_duplicates(batch, tally)
    tally.num_read += batch.num_read
    tally.num_skipped += batch.num_skipped
    if rows.num_rows:
        con.register("batch_rows", rows)
        con.execute(load_sql("insert_requests"), {"source_id": tally.source_id})
        con.unregister("batch_rows")
        tally.num_stored += rows.num_rows
        tally.num_prompt_tokens += pa.compute.sum(rows.column("prompt_tokens")).as_py()
        if len(tally.block_sizes) < 2:
            sizes = pa.compute.unique(rows.column("block_size").drop_null()).to_pylist()
            tally.block_sizes.update(sizes[:2])
    if rejects:
        _insert_rejects(con, rejects, tally)
    if batch.cut_at_tokens is not None:
        _flag_cut(con, batch.cut_at_tokens, tally)


def _insert_rejects(con, rejects: list[Reject], tally: _Tally) -> None:
    con.register("reject_rows", rejects_table(rejects, tally.source_id, tally.path))
    con.execute(load_sql("ingest_insert_rejects"))
    con.unregister("reject_rows")
    tally.num_rejected += len(rejects)
    tally.num_undecodable += sum(r.reason.startswith(_UNDECODABLE) for r in rejects)
    tally.num_no_ids += sum(r.reason == MISSING_IDS for r in rejects)
    tally.rejects.extend(rejects[: MAX_REJECTS_KEPT - len(tally.rejects)])


def _flag_cut(con, cut_at: int, tally: _Tally) -> None:
    """The file's prompts of exactly `cut_at` ids, which its log may have cut (the last
    batch's verdict; every row of the file is stored by then): flagged in
    requests.log_cut_tokens, or with --reject-truncated removed and rejected."""
    tally.cut_at = cut_at
    params = {"source_id": tally.source_id, "cut_at": cut_at}
    if not tally.reject_cut:
        tally.num_cut = con.execute(load_sql("ingest_flag_cut"), params).fetchall()[0][0]
        return
    cut = sorted(con.execute(load_sql("ingest_delete_cut"), params).fetchall())
    reason = (
        f"{cut_at:,} ids, where this log cuts its token lists (vLLM's --max-log-len): the "
        "prompt may be longer (--reject-truncated)"
    )
    _insert_rejects(
        con, [Reject(line, "prompt_token_ids", reason, rid) for line, rid in cut], tally
    )
    for _, rid in cut:
        tally.first_seen.pop(rid, None)
    tally.num_cut = len(cut)
    tally.num_stored -= len(cut)
    tally.num_prompt_tokens -= len(cut) * cut_at


def _drop_duplicates(batch: Batch, tally: _Tally) -> tuple[pa.Table, list[Reject]]:
    """Keep the first record of each request id (in this and earlier files); reject the rest."""
    ids = batch.rows.column("request_id").to_pylist()
    lines = batch.rows.column("line_no").to_pylist()
    keep: list[int] = []
    rejects = list(batch.rejects)
    for i, (rid, line) in enumerate(zip(ids, lines, strict=True)):
        seen = tally.first_seen.get(rid)
        if seen is None:
            tally.first_seen[rid] = (tally.source_id, line)
            keep.append(i)
            continue
        where = (
            f"line {seen[1]}"
            if seen[0] == tally.source_id
            else f"{tally.sources.get(seen[0], f'source {seen[0]}')}:{seen[1]}"
        )
        rejects.append(Reject(line, "request_id", f"duplicate {rid!r}, first seen at {where}", rid))
        tally.num_duplicates += 1
    rejects.sort(key=lambda r: r.line_no)
    rows = batch.rows if len(keep) == len(ids) else batch.rows.take(pa.array(keep, pa.int64()))
    return rows, rejects


def _single(block_sizes: set[int]) -> int | None:
    """The block size of a canonical hash-id file whose rows all share one, else None."""
    return next(iter(block_sizes)) if len(block_sizes) == 1 else None


def _check_parseable(path: Path, fmt: str, tally: _Tally) -> None:
    """A JSONL file in which no line is a JSON object cannot be parsed at all; a trace in
    which no record has token ids or block hashes cannot be prefix-analysed."""
    if tally.num_stored or not tally.num_read:
        return
    if tally.num_no_ids == tally.num_read:
        raise InputFileError(
            f"{path}: none of its {plural(tally.num_read, 'record')} has token ids or block "
            f"hashes: {NO_IDS_WHY}"
        )
    if fmt != "jsonl":
        return
    if tally.num_undecodable == tally.num_read:
        first = tally.rejects[0]
        raise InputFileError(f"{path}: not JSON Lines (line {first.line_no}: {first.reason})")
