"""A command stopped by a signal (SIGTERM, or Ctrl-C's SIGINT) says what the store holds of it.

The CLI installs `on_signal` for both. It notes the signal and raises `Stopped`, which
unwinds like an error: open transactions roll back, workers stop. Three places would make
what the command then says untrue, or say nothing, and this module closes them:

- A commit. The store's `transaction` commits inside `holding()`: a signal that comes while
  DuckDB commits waits until the commit has ended and what it stored is noted (`landed`),
  then stops the command. Without it, the signal would arrive after a commit DuckDB had
  made and the command would say "nothing stored".
- An import. An extension module's initialisation may run Python code and not survive an
  exception raised in it (DuckDB's aborts the process): a signal that comes while a module
  is imported is sent again a moment later (`on_signal`).
- DuckDB. Python runs a signal's handler between two of its own instructions, so a long
  statement would run to its end first: a thread woken by the signal (`watch_signals`)
  interrupts the statements of the connections `watch`ed, except while holding. DuckDB
  then raises an error of its own ("INTERRUPT Error", "Query interrupted"), and may raise
  one in place of the handler's `Stopped`: the CLI asks `stopped_by()`, not the
  exception's type.

What each commit stored is what its writer named (`transaction(con, lands=...)`): a replay
run, a sweep, the files of an ingest, a match, a validation. A command that was stopped
says those, or that nothing of it was stored.

Files are written whole or not at all (a file beside them, renamed over them): each writer
notes a file as it renames it (`note_written`, inside `holding()`), and the line names the
files there. A command that writes files and never the store (synth, report, ...) says
"written" where others say "stored".
"""

from __future__ import annotations

import os
import signal
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager


class Stopped(BaseException):  # noqa: N818  (a signal, not an error: no `except Exception` takes it)
    """Raised where a signal stops the command (the main thread, at the next bytecode)."""

    def __init__(self, signum: int, stored: tuple[str, ...] = ()) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.stored = stored  # what the commit that held it back stored (it has landed)


class _State:
    driver_pid: int | None = None  # armed in this process (`arm`): the command's own
    signum: int | None = None  # the first signal of this command
    holding = 0  # depth of `holding()` blocks open
    pending: int | None = None  # a signal that came while holding
    finished = False  # the command has ended: a late signal is ignored
    landed: list[str] = []
    written: list[str] = []


_STATE = _State()


SIGNALS = (signal.SIGTERM, signal.SIGINT)


def arm() -> None:
    """Make SIGTERM and Ctrl-C stop the command of this process as this module says (the
    CLI's `main`; a library caller keeps Python's own handling)."""
    _STATE.driver_pid = os.getpid()
    for signum in SIGNALS:
        signal.signal(signum, on_signal)
    _watch_signals()


def disarm() -> None:
    """The command has ended: ignore the signals from now on. Python puts back the default
    action of a signal it handled as it shuts down, and a signal then would end a command
    that has done its work with 143; it leaves one it ignores ignored."""
    finish()
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def on_signal(signum: int, frame) -> None:
    """The handler of SIGTERM and SIGINT in the process that runs the command. A forked
    worker that has not reset it yet just ends (the driver speaks for it)."""
    if os.getpid() != _STATE.driver_pid:
        os._exit(128 + signum)
    if _STATE.finished:
        return
    if _STATE.signum is None:
        _STATE.signum = signum
    if _STATE.holding:
        _STATE.pending = signum
        return
    if _importing(frame):
        # An extension module's initialisation may run Python code (DuckDB's builds its
        # enums so) and not survive an exception raised in it: DuckDB's aborts the process
        # (SIGABRT, no line said). The signal is sent again a moment later, once imported.
        again = threading.Timer(RESEND_S, os.kill, (os.getpid(), signum))
        again.daemon = True
        again.start()
        return
    raise Stopped(signum)


RESEND_S = 0.02  # a signal that came during an import is sent again after this


def _importing(frame) -> bool:
    """Whether `frame` runs inside an import (Python's import machinery is on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


@contextmanager
def holding() -> Iterator[None]:
    """A block that a signal does not cut short (a commit and the note of what it stored);
    the signal stops the command when the outermost such block ends."""
    _STATE.holding += 1
    noted = len(_STATE.landed)
    try:
        yield
    finally:
        _STATE.holding -= 1
        if not _STATE.holding and _STATE.pending is not None:
            signum, _STATE.pending = _STATE.pending, None
            raise Stopped(signum, tuple(_STATE.landed[noted:]))


_WATCHED: weakref.WeakSet = weakref.WeakSet()  # connections a signal interrupts


def watch(con):
    """`con` (a DuckDB connection), whose running statement a signal interrupts."""
    _WATCHED.add(con)
    return con


def _watch_signals() -> None:
    """Interrupt the watched connections' statements on each signal the process is sent
    (a thread woken through `signal.set_wakeup_fd`), unless a commit is holding."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    threading.Thread(target=_interrupt, args=(read_fd,), name="hpa-signals", daemon=True).start()


def _interrupt(read_fd: int) -> None:
    while os.read(read_fd, 64):
        if _STATE.finished or _STATE.holding:
            continue
        for con in list(_WATCHED):
            try:
                con.interrupt()
            except Exception:  # noqa: BLE001  (closed since: nothing runs on it)
                pass


def note_landed(what: list[str]) -> None:
    """Note that a commit stored `what` (e.g. ["replay run 7"]); inside `holding()`. Kept
    only where armed: a library caller's process would collect them without end."""
    if _STATE.driver_pid is not None:
        _STATE.landed.extend(what)


def landed() -> tuple[str, ...]:
    """What this command's commits stored, in order."""
    return tuple(_STATE.landed)


def note_written(path) -> None:
    """Note that the file at `path` was written whole (renamed into place); inside
    `holding()`, with the rename. Kept only where armed, as `note_landed`."""
    if _STATE.driver_pid is not None:
        _STATE.written.append(str(path))


def written() -> tuple[str, ...]:
    """The files this command wrote whole, in order."""
    return tuple(_STATE.written)


def stopped_by() -> int | None:
    """The signal that stopped this command, or None."""
    return _STATE.signum


def finish() -> None:
    """The command has ended (or is ending with an error): a signal now changes nothing."""
    _STATE.finished = True


def message(signum: int, *, files_only: bool = False) -> str:
    """The one line a stopped command ends with: what stopped it and what is stored and
    written; `files_only`: a command that writes files and never the store."""
    if signum == signal.SIGINT:
        what = "interrupted (Ctrl-C)"
    else:
        what = f"terminated ({signal.Signals(signum).name})"
    stored, files, kept = so_far(files_only=files_only)
    done = [f"storing {stored}"] if stored else []
    done += [f"writing {files}"] if files else []
    if not done:
        return f"{what}; nothing of this command was {kept}"
    return f"{what} after {' and '.join(done)} (whole); nothing else of this command was {kept}"


def so_far(*, files_only: bool = False) -> tuple[str, str, str]:
    """What this command stored (`listing` of `landed`, or ""), the files it wrote whole
    (or ""), and the word for the rest of it: "stored", "written" (`files_only`: a command
    that writes files and never the store) or "stored or written" (a store command that
    also wrote a file)."""
    stored, files = landed(), written()
    kept = "written" if files_only else "stored or written" if files else "stored"
    return listing(stored) if stored else "", ", ".join(files), kept


def listing(stored: tuple[str, ...]) -> str:
    """`stored`, runs of consecutive numbers of one thing shortened: "replay runs 7-9"."""
    groups: list[list] = []  # [what, first, last]
    for item in stored:
        what, _, number = item.rpartition(" ")
        n = int(number) if number.isdigit() else None
        last = groups[-1] if groups else None
        if n is not None and last and last[0] == what and last[2] == n - 1:
            last[2] = n
        else:
            groups.append([what if n is not None else item, n, n])
    return ", ".join(
        what if first is None
        else f"{what} {first}" if first == last
        else f"{what}s {first}-{last}" if last > first + 1
        else f"{what}s {first} and {last}"
        for what, first, last in groups
    )  # fmt: skip


def reset() -> None:
    """A fresh state (tests that run several commands in one process)."""
    _STATE.signum = _STATE.pending = None
    _STATE.holding = 0
    _STATE.finished = False
    _STATE.landed = []
    _STATE.written = []
