"""store.write_units: batches merged into write units, and parsed one ahead in a thread."""

import threading

import pyarrow as pa
import pytest

from analyzer.store import write_units
from analyzer.store.write_units import prefetched
from analyzer.traces.batches import Batch, Reject
from analyzer.traces.records import ROW_SCHEMA


def test_write_units_by_rows_and_by_token_ids(monkeypatch):
    def batch(n_rows: int, tokens: int, rejects: int = 0) -> Batch:
        rows = [
            {"request_id": f"x{i}", "line_no": i, "prompt_tokens": tokens,
             "prompt_token_ids": [0] * tokens}
            for i in range(n_rows)
        ]  # fmt: skip
        bad = [Reject(100 + i, None, "bad", "") for i in range(rejects)]
        return Batch(pa.Table.from_pylist(rows, schema=ROW_SCHEMA), bad, num_skipped=1)

    monkeypatch.setattr(write_units, "WRITE_UNIT_ROWS", 5)
    monkeypatch.setattr(write_units, "WRITE_UNIT_UNITS", 100)
    units = list(write_units.write_units([batch(2, 1), batch(2, 1, 1), batch(3, 1), batch(1, 1)]))
    assert [(u.rows.num_rows, len(u.rejects), u.num_skipped) for u in units] == [
        (4, 1, 2),  # 5 records read: a unit
        (4, 0, 2),  # the rest
    ]
    units = list(write_units.write_units([batch(1, 60), batch(1, 50), batch(1, 1)]))
    assert [u.rows.num_rows for u in units] == [2, 1]  # 110 token ids >= 100


def test_prefetched_gives_every_item_in_order():
    assert list(prefetched(iter(range(100)))) == list(range(100))
    assert list(prefetched(iter([]))) == []


def test_what_the_producer_raises_is_raised_where_its_item_would_come():
    def items():
        yield 1
        yield 2
        raise OSError("disk went away")

    got = []
    with pytest.raises(OSError, match="disk went away"):
        for item in prefetched(items()):
            got.append(item)
    assert got == [1, 2]


def test_closing_stops_the_producer_within_one_item():
    produced = []

    def items():
        for i in range(1000):
            produced.append(i)
            yield i

    stream = prefetched(items())
    assert next(stream) == 0
    stream.close()
    assert len(produced) <= 3  # the one handed over, one waiting, one being made
    assert not [t for t in threading.enumerate() if t.name == "hpa-ingest-reader"]
