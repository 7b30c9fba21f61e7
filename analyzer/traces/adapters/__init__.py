"""Adapters: readers for public trace formats that translate each record to the canonical one.

Each adapter is a reader (path, stream, progress) -> Batches, like those in `readers.py`,
and hands canonical records to `batches.exact_batch`, so line numbers, rejects and
read = stored + rejected work exactly as for canonical JSONL.

Every adapter module ends with its `ADAPTER` (what `readers.py` needs of it: the reader, what
the `sources` table records, how its files are recognised). `NAMES` is the one list of them:
adding an adapter is its module and its name here. The order is detection's: a file is the
first format whose test it passes, so the loosest test (Mooncake's) comes last.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from analyzer.traces.batches import Batch, SourceInfo

# Module names (= format names), in detection order; `--format` lists them in this order.
NAMES = (
    "weka",
    "ragpulse",
    "bailian",
    "tracelab",
    "vllm_bench",
    "vllm_log",
    "sglang_log",
    "chat",
    "mooncake",
)


@dataclass(frozen=True)
class Adapter:
    """One format an adapter reads. `record(first JSON object, first MiB)`: whether a JSON
    Lines file is this format's; `text(first MiB)`: whether a text file (a server log) is;
    `side_table(path)`: why a file is this format's part, read with another (None: it is
    not)."""

    name: str
    read: Callable[[Path, BinaryIO, Callable[[], None]], Iterator[Batch]]
    source: SourceInfo
    record: Callable[[Any, bytes], bool] | None = None
    text: Callable[[bytes], bool] | None = None
    side_table: Callable[[Path], str | None] | None = None


def adapters() -> tuple[Adapter, ...]:
    """Every adapter, in detection order (each module imported here)."""
    return tuple(import_module(f"{__name__}.{name}").ADAPTER for name in NAMES)
