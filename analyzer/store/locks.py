"""What a store that cannot be opened is told as: another process holding its lock (DuckDB
lets one process write a file at a time) is named, with its command line where it is an
hpa command, so the user knows what to wait for; a disk that cannot take it is the
machine's error, not the store's."""

from __future__ import annotations

import re
from pathlib import Path

from analyzer.errors import StoreError
from analyzer.store.faults import errors_behind, first_line

# DuckDB: 'Could not set lock on file "P": Conflicting lock is held in EXE (PID 123) ...'
_HELD = re.compile(r"Conflicting lock is held in (?P<exe>.+?) \(PID (?P<pid>\d+)\)")
_HPA_ENTRIES = ("analyzer.cli", "analyzer")  # `python -m analyzer`, `-c "...analyzer.cli..."`


# DuckDB's words for a block of the file that fails its checksum (pyarrow's stream reader
# passes them on in an OSError), or a file whose header is no DuckDB header.
_DAMAGE = re.compile(r"Corrupt database file|Data Corruption Error|not a valid DuckDB database")


def damage(exc: BaseException) -> str | None:
    """DuckDB's words where `exc`, or an error it was raised from or while handling, says a
    store's file is damaged; else None."""
    for e in errors_behind(exc):
        text = str(e).strip()
        found = _DAMAGE.search(text)
        if found:
            return text[found.start() :].splitlines()[0]
    return None


def damaged_store(path: Path | str | None, why: str, stored: str = "nothing was stored") -> str:
    """The one line for a store whose file is damaged (`path`, None: not known; `why`:
    DuckDB's words; `stored`: what the command stored before it found out)."""
    store = f"{path}: the store" if path is not None else "the store"
    return (
        f"{store} is damaged ({why}); {stored}; restore it from a copy, or ingest the traces "
        "into a new store"
    )


def open_error(path: Path, exc: BaseException) -> StoreError:
    """The one-line error for `path` that DuckDB would not open (`exc`, its error)."""
    if (why := damage(exc)) is not None:
        return StoreError(damaged_store(path, why))
    text = str(exc).strip()
    held = _HELD.search(text)
    first = first_line(exc)
    if "Could not write" in text:  # a full disk, a quota: the machine's, not the store's
        return StoreError(f"{path}: could not be written ({first}); nothing was stored")
    if "Operation not permitted" in text or "Permission denied" in text:
        return StoreError(f"{path}: cannot be written here ({first}); nothing was stored")
    if held is None:
        return StoreError(f"{path}: cannot open as a DuckDB database ({first})")
    pid = int(held["pid"])
    command = _hpa_command(pid)
    holder = f"another hpa command (pid {pid}: {command})" if command else (
        f"another process (pid {pid}: {held['exe']})"
    )  # fmt: skip
    return StoreLockedError(f"{path}: locked by {holder}; run this again when it has ended")


class StoreLockedError(StoreError):
    """The store is open in another process that keeps this one from opening it."""


def _hpa_command(pid: int) -> str | None:
    """'hpa replay --db x' where process `pid` runs an hpa command, else None."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # not Linux, or the process has just ended
        return None
    return hpa_command([a for a in raw.decode(errors="replace").split("\0") if a])


def hpa_command(argv: list[str]) -> str | None:
    """The hpa command a process's `argv` runs ('hpa replay --db x'), or None: the `hpa`
    script (run by its interpreter or directly), or `python -m analyzer`."""
    for i, arg in enumerate(argv):
        if Path(arg).name == "hpa":
            return " ".join(["hpa", *argv[i + 1 :]])
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1] in _HPA_ENTRIES:
            return " ".join(["hpa", *argv[i + 2 :]])
    return None
