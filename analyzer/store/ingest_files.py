"""The files an ingest reads: which ones a path stands for, why one cannot be read, its
sha256 (in a thread, while it is read) and where a damaged one is damaged."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from analyzer.errors import InputFileError
from analyzer.traces.io import damage_at
from analyzer.traces.readers import TRACE_SUFFIXES, not_a_trace, side_table


def listed_files(path: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """([path], []), or for a directory (the files directly in it named like a trace, by
    name; the other files with why they are left out); hidden files are not looked at."""
    if not path.is_dir():
        part = side_table(path) if path.is_file() else None
        return ([], [(path, part)]) if part else ([path], [])
    traces, others = [], []
    for p in sorted(path.iterdir()):
        if p.is_file() and not p.name.startswith("."):
            why = not_a_trace(p)
            if why is None:
                traces.append(p)
            else:
                others.append((p, why))
    if not traces:
        raise InputFileError(
            f"{path}: a directory with no trace files in it (names ending in "
            f"{', '.join(TRACE_SUFFIXES)}, also .gz or .zst)"
        )
    return traces, others


def check_name(path: Path) -> None:
    """A file name the store can keep: DuckDB holds text as UTF-8, so a name with a byte
    that is no UTF-8 (a surrogate of os.fsdecode) is refused before anything is read."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(path).decode("utf-8", "backslashreplace")
        raise InputFileError(
            f"{shown}: the file name is not UTF-8 (the store keeps each file's name as "
            "text); rename the file"
        ) from None


def not_a_file(path: Path) -> str:
    """Why `path`, which is no regular file, cannot be ingested."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a loop of symbolic links"
        if os.path.lexists(path):
            return f"cannot be read ({exc.strerror or exc})"
        return "no such file"
    if stat.S_ISFIFO(mode):
        return (
            "a pipe, not a file: ingest reads a file twice (its sha256, then its records); "
            "save the stream to a file first"
        )
    return "not a regular file"


def sha256_of(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def sha256_later(path: Path) -> Callable[[], str]:
    """The file's sha256, as a call that waits for it: computed in a thread while the file
    is read (hashing and reading release the GIL; on 70 M tokens 0.3 s no longer in line)."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="hpa-sha256")
    future = pool.submit(sha256_of, path)
    pool.shutdown(wait=False)

    def result() -> str:
        try:
            return future.result()
        except OSError as exc:
            raise unreadable(path, exc) from None

    return result


def check_readable(path: Path) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise unreadable(path, exc) from None


def unreadable(path: Path, exc: OSError) -> InputFileError:
    return InputFileError(f"{path}: cannot read ({exc.strerror or exc})")


def damage(path: Path) -> str:
    """Where a file that cannot be read is damaged: " at the start", " after line N" (lines
    1 to N read whole) or " in line N" (cut inside it), with the byte of its content; "" where
    reading it again gets through."""
    found = damage_at(path)
    if found is None:
        return ""
    if not found.num_bytes:
        return " at the start"
    where = (
        f"after line {found.num_lines:,}"
        if found.at_line_end
        else f"in line {found.num_lines + 1:,}"
    )
    return f" {where} (byte {found.num_bytes:,} of its decompressed content)"
