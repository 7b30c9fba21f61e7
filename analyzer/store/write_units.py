"""How ingest feeds DuckDB: a reader's batches merged into write units, the next unit
parsed in a thread while this one is stored.

- Write units: DuckDB's cost per insert (a commit, its WAL, checkpoints) made 1,350-row
  inserts of a 70 M-token trace 1.7x slower than 20,000-row ones; a unit holds at least
  WRITE_UNIT_ROWS records or WRITE_UNIT_UNITS token ids (about 4 bytes each).
- Prefetch: parsing (the token scanner, Arrow's JSON reader) and DuckDB's insert both
  release the GIL, so the next unit parses while this one is stored (`prefetched(
  write_units(batches))`). A whole unit ahead, not a batch: a unit is several batches, and
  one batch ahead let the parser run only while the first of them was stored (70 M tokens:
  4.0 -> 3.2 s). One unit ahead at most: memory stays flat.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa

if TYPE_CHECKING:  # imported where a unit is made: `prefetched` alone serves match, replay
    from analyzer.traces.batches import Batch

WRITE_UNIT_ROWS = 16384
WRITE_UNIT_UNITS = 1 << 24
_TOKEN_COLUMNS = ("prompt_token_ids", "block_hash_ids", "output_token_ids")

T = TypeVar("T")
_END = object()


def write_units(batches: Iterable[Batch]) -> Iterator[Batch]:
    """`batches` merged, in order, into units of at least WRITE_UNIT_ROWS records or
    WRITE_UNIT_UNITS token ids and hash ids (the last one may be smaller)."""
    held: list[Batch] = []
    rows = units = 0
    for batch in batches:
        held.append(batch)
        rows += batch.num_read
        units += _num_units(batch.rows)
        if rows >= WRITE_UNIT_ROWS or units >= WRITE_UNIT_UNITS:
            yield _merged(held)
            held, rows, units = [], 0, 0
    if held:
        yield _merged(held)


def _num_units(rows: pa.Table) -> int:
    import pyarrow.compute as pc

    return sum(pc.sum(pc.list_value_length(rows.column(n))).as_py() or 0 for n in _TOKEN_COLUMNS)


def _merged(batches: list[Batch]) -> Batch:
    from analyzer.traces.batches import Batch

    if len(batches) == 1:
        return batches[0]
    return Batch(
        pa.concat_tables([b.rows for b in batches], promote_options="permissive"),
        [r for b in batches for r in b.rejects],
        sum(b.num_skipped for b in batches),
        next((b.cut_at_tokens for b in batches if b.cut_at_tokens is not None), None),
    )


def prefetched(items: Iterator[T]) -> Iterator[T]:
    """`items` in order, each produced in a thread while the caller handles the one before.
    What the producer raises is raised here, where that item would have come. Closing this
    generator (or an error in the caller) stops the thread after at most one more item and
    waits for it, so the caller may then close what the producer reads."""
    handoff: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(entry: tuple) -> bool:
        while not stop.is_set():
            try:
                handoff.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((_END, None))
        except BaseException as exc:  # re-raised in the consumer, with its type
            put((_END, exc))

    worker = threading.Thread(target=produce, name="hpa-ingest-reader", daemon=True)
    worker.start()
    try:
        while True:
            item, exc = handoff.get()
            if exc is not None:
                raise exc
            if item is _END:
                return
            yield item
    finally:
        stop.set()
        worker.join()
