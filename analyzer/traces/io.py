"""Opening trace files: the decompressed byte stream of a .gz / .zst / plain file, read
through a counter of the compressed bytes (for progress)."""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import BinaryIO

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


def open_binary(path: Path, counter: CountingReader) -> BinaryIO:
    """The decompressed byte stream of `path` read through `counter`."""
    kind = COMPRESSED.get(path.suffix.lower())
    buffered = io.BufferedReader(counter, 1 << 20)
    if kind == "gzip":
        return gzip.GzipFile(fileobj=buffered, mode="rb")
    if kind == "zstd":
        import zstandard  # only needed for .zst input

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(buffered), 1 << 20)
    return buffered
