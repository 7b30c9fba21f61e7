"""Opening trace files: the decompressed byte stream of a .gz / .zst / plain file, read
through a counter of the compressed bytes (for progress); and the temporary file an output is
written in before it is renamed over its name (`scratch_file`, `written_whole`)."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from analyzer import interrupts
from analyzer.errors import InputFileError

COMPRESSED = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}


class CountingReader(io.RawIOBase):
    """Counts the bytes read from the underlying file, for progress on compressed input."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.num_bytes = raw, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.raw.readinto(buffer)
        self.num_bytes += n or 0
        return n


class ZstdReader(io.RawIOBase):
    """The decompressed bytes of a zstd stream (one or more frames). zstandard's stream
    reader ends quietly where a cut file ends; this one raises EOFError when the input stops
    inside a frame or holds none, so a truncated trace is an error, not a shorter trace."""

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard  # only needed for .zst input

        self._new = zstandard.ZstdDecompressor().decompressobj
        self._raw, self._frame = raw, self._new()
        self._out, self._pos = b"", 0  # decompressed bytes not yet read, from _pos on
        self._frames, self._in_frame, self._done = 0, False, False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._pos >= len(self._out) and not self._done:
            self._out, self._pos = self._fill(), 0
        n = min(len(buffer), len(self._out) - self._pos)
        buffer[:n] = self._out[self._pos : self._pos + n]
        self._pos += n
        return n

    def _fill(self) -> bytes:
        chunk = self._raw.read(1 << 20)
        if not chunk:
            if self._in_frame or not self._frames:
                raise EOFError("truncated zstd stream: the file ends inside a frame")
            self._done = True
            return b""
        parts = []
        while chunk:
            self._in_frame = True
            parts.append(self._frame.decompress(chunk))
            if not self._frame.eof:
                break
            self._frames, self._in_frame = self._frames + 1, False
            chunk, self._frame = self._frame.unused_data, self._new()
        return b"".join(parts)


class Damage(NamedTuple):
    """Where a compressed file stops reading: the whole lines and the bytes of its content
    decoded before the damage, and whether those end at a line's end."""

    num_lines: int
    num_bytes: int
    at_line_end: bool


def damage_at(path: Path) -> Damage | None:
    """Where `path` cannot be read further, found by reading it again, or None where it now
    reads through. Each step is one read of the decompressor (`read1`), so what it decoded
    before the damage is counted: the lines are whole and good, the damage is in the next."""
    num_lines = num_bytes = 0
    last = b"\n"
    try:
        with open(path, "rb") as raw, open_binary(path, CountingReader(raw)) as stream:
            while piece := stream.read1(DAMAGE_STEP_BYTES):
                num_lines += piece.count(b"\n")
                num_bytes += len(piece)
                last = piece[-1:]
    except Exception:  # what the decompressor raises: the damage, met again
        return Damage(num_lines, num_bytes, last == b"\n")
    return None


DAMAGE_STEP_BYTES = 1 << 16


def open_binary(path: Path, counter: CountingReader) -> BinaryIO:
    """The decompressed byte stream of `path` read through `counter`."""
    kind = COMPRESSED.get(path.suffix.lower())
    buffered = io.BufferedReader(counter, 1 << 20)
    if kind == "gzip":
        return gzip.GzipFile(fileobj=buffered, mode="rb")
    if kind == "zstd":
        return io.BufferedReader(ZstdReader(buffered), 1 << 20)
    return buffered


# The temporary file of an output: hidden, in the output's folder (a rename within one file
# system is atomic), with a short name of its own, so that any name a folder takes (255 bytes)
# can be written. `.NAME.tmp` was past 255 bytes for a NAME of 252 to 255.
SCRATCH_PREFIX, SCRATCH_SUFFIX = ".hpa-", ".tmp"


def scratch_file(folder: Path) -> Path:
    """A new empty file in `folder` (`.hpa-XXXXXXXXXXXX.tmp`, a name no other file has), made
    as open() makes a file (its mode 0666 less the umask: the output renamed from it is
    readable as any other file), for the caller to write, rename and remove.

    Raises:
        OSError: no file can be made in `folder` (the system's words)."""
    while True:
        path = folder / f"{SCRATCH_PREFIX}{secrets.token_hex(6)}{SCRATCH_SUFFIX}"
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:  # another's: 1 in 2**48 a try
            continue
        except OSError:  # none can be made: the system's words
            raise
        except BaseException:  # a signal as it was made: the caller never had its name
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
            raise
        return path


def is_scratch(name: str) -> bool:
    """Whether `name` is one `scratch_file` gives (what a killed writer may leave)."""
    return name.startswith(SCRATCH_PREFIX) and name.endswith(SCRATCH_SUFFIX)


@contextlib.contextmanager
def written_whole(path: Path, cannot: Callable[[str], str]) -> Iterator[Path]:
    """Yields a new scratch file beside `path` to write; when the block ends, renames it over
    `path` and notes the file as written (`interrupts.note_written`, inside `holding()`: a
    signal then stops the command once the file is named). Any error removes it, Ctrl-C
    included: no file is left, nor half of one.

    Raises:
        InputFileError: the system refused a write, `cannot(why)` its message."""
    tmp = None
    try:
        tmp = scratch_file(path.parent)
        yield tmp
        with interrupts.holding():
            os.replace(tmp, path)
            interrupts.note_written(path)
    except OSError as exc:
        discard(tmp)
        raise InputFileError(cannot(exc.strerror or str(exc))) from None
    except BaseException:
        discard(tmp)
        raise


def discard(tmp: Path | None) -> None:
    """Remove the scratch file `tmp` (None: none was made)."""
    if tmp is not None:
        with contextlib.suppress(OSError):  # a read-only folder refuses even this
            tmp.unlink(missing_ok=True)
