"""Ingest into DuckDB: every record stored or rejected, arrival order, re-ingest, formats."""

from __future__ import annotations

import gzip
import os
import re
import tempfile
import zlib
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.errors import InputFileError
from analyzer.store.ingest import ingest
from tests.conftest import db_rows as rows
from tests.conftest import write_jsonl


def test_stores_fields_and_counts(tmp_path, db):
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {
                "request_id": "a",
                "timestamp": 2.0,
                "prompt_token_ids": [1, 2, 3],
                "output_token_ids": [9],
                "model_revision": "m1",
                "prompt_family": "chat",
                "replica": 3,
                "ttft_ms": 12.5,
                "custom": {"x": 1},
            },
            {
                "request_id": "b",
                "timestamp": 1.0,
                "block_hash_ids": [7, 8],
                "block_size": 16,
                "prompt_tokens": 20,
            },
        ],
    )
    result = ingest([path], db_path=db)
    assert (result.num_read, result.num_stored, result.num_rejected) == (2, 2, 0)
    got = rows(
        db,
        "SELECT request_id, arrival_seq, prompt_tokens, prompt_token_ids, "
        "block_hash_ids, output_tokens, replica, prompt_family_source, extra "
        "FROM requests ORDER BY arrival_seq",
    )
    assert got == [
        ("b", 0, 20, None, [7, 8], None, None, None, None),
        ("a", 1, 3, [1, 2, 3], None, 1, "3", "trace", '{"custom":{"x":1}}'),
    ]
    assert rows(
        db, "SELECT num_read, num_stored, num_rejected, num_prompt_tokens, format FROM sources"
    ) == [(2, 2, 0, 23, "jsonl")]


def test_cached_tokens_stored_and_checked(tmp_path, db):
    path = write_jsonl(
        tmp_path / "c.jsonl",
        [
            {"request_id": "a", "prompt_token_ids": [1, 2, 3], "cached_tokens": 2},
            {"request_id": "b", "block_hash_ids": [7, 8], "block_size": 16, "cached_tokens": 32},
            {"request_id": "c", "prompt_token_ids": [1], "cached_tokens": 2},
            {"request_id": "d", "prompt_token_ids": [1]},
        ],
    )
    result = ingest([path], db_path=db)
    assert (result.num_read, result.num_stored, result.num_rejected) == (4, 3, 1)
    assert rows(db, "SELECT request_id, cached_tokens, extra FROM requests ORDER BY 1") == [
        ("a", 2, None),
        ("b", 32, None),
        ("d", None, None),
    ]
    assert rows(db, "SELECT line_no, field, reason FROM rejects") == [
        (3, "cached_tokens", "2 is more than prompt_tokens (1)")
    ]


def test_sources_block_size_and_provenance(tmp_path, db):
    ids = write_jsonl(tmp_path / "ids.jsonl", [{"request_id": "a", "prompt_token_ids": [1]}])
    hashes = write_jsonl(
        tmp_path / "h.jsonl",
        [{"request_id": f"h{i}", "block_hash_ids": [i], "block_size": 16} for i in range(3)],
    )
    mixed = write_jsonl(
        tmp_path / "m.jsonl",
        [
            {"request_id": "m1", "block_hash_ids": [1], "block_size": 16},
            {"request_id": "m2", "block_hash_ids": [1], "block_size": 32},
        ],
    )
    mooncake = write_jsonl(
        tmp_path / "mc.jsonl", [{"timestamp": 0, "input_length": 5, "hash_ids": [1]}]
    )
    ingest([ids, hashes, mixed, mooncake], db_path=db)
    got = rows(db, "SELECT format, block_size, provenance FROM sources ORDER BY source_id")
    assert [g[:2] for g in got] == [
        ("jsonl", None),
        ("jsonl", 16),
        ("jsonl", None),
        ("mooncake", 512),
    ]
    assert [g[2] is None for g in got] == [True, True, True, False]
    assert "github.com/kvcache-ai/Mooncake" in got[3][2] and "Apache-2.0" in got[3][2]


def test_database_from_before_cached_tokens_gains_the_columns(tmp_path, db):
    import duckdb

    first = write_jsonl(tmp_path / "1.jsonl", [{"request_id": "a", "prompt_token_ids": [1]}])
    ingest([first], db_path=db)
    con = duckdb.connect(str(db))  # the layout of a database written before these columns
    for table, column in (
        ("requests", "cached_tokens"),
        ("sources", "block_size"),
        ("sources", "provenance"),
    ):
        con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    con.close()
    second = write_jsonl(
        tmp_path / "2.jsonl", [{"request_id": "b", "prompt_token_ids": [1, 2], "cached_tokens": 1}]
    )
    assert ingest([second], db_path=db).num_stored == 1
    assert rows(db, "SELECT request_id, cached_tokens FROM requests ORDER BY 1") == [
        ("a", None),
        ("b", 1),
    ]
    assert rows(db, "SELECT source_id, block_size FROM sources ORDER BY 1") == [
        (1, None),
        (2, None),
    ]


def test_arrival_order_ties_and_missing_timestamps(tmp_path, db):
    first = write_jsonl(
        tmp_path / "1.jsonl",
        [
            {"request_id": "a", "timestamp": 5, "prompt_token_ids": [1]},
            {"request_id": "b", "prompt_token_ids": [1]},  # inherits 5, stays after a
            {"request_id": "c", "timestamp": 1, "prompt_token_ids": [1]},
        ],
    )
    second = write_jsonl(
        tmp_path / "2.jsonl",
        [
            {"request_id": "d", "timestamp": 5, "prompt_token_ids": [1]},  # tie: later file
            {"request_id": "e", "timestamp": "1970-01-01T00:00:03Z", "prompt_token_ids": [1]},
        ],
    )
    ingest([first, second], db_path=db)
    order = rows(db, "SELECT request_id FROM requests ORDER BY arrival_seq")
    assert [r[0] for r in order] == ["c", "e", "a", "b", "d"]


def test_token_ids_are_stored_unpacked_and_hash_ids_as_duckdb_chooses(tmp_path, db):
    records = [
        {
            "request_id": f"r{i}",
            "prompt_token_ids": list(range(i, i + 300)),
            "output_token_ids": [i, 7 * i],
        }
        for i in range(100)
    ] + [{"request_id": "h", "block_hash_ids": list(range(300)), "block_size": 16}]
    ingest([write_jsonl(tmp_path / "t.jsonl", records)], db_path=db)
    sql = (
        "SELECT column_name, list(DISTINCT compression ORDER BY compression) "
        "FROM pragma_storage_info('requests') WHERE segment_type IN ('INTEGER', 'BIGINT') "
        "AND column_name LIKE '%_ids' GROUP BY ALL ORDER BY 1"
    )
    found = dict(rows(db, sql))
    assert found["prompt_token_ids"] == ["Uncompressed"]
    assert found["output_token_ids"] == ["Uncompressed"]
    assert found["block_hash_ids"] != ["Uncompressed"]  # small ids: bit-packed as before


def test_reingest_identical_file_adds_nothing(tmp_path, db):
    path = write_jsonl(tmp_path / "t.jsonl", [{"request_id": "a", "prompt_token_ids": [1]}])
    ingest([path], db_path=db)
    again = ingest([path], db_path=db).sources[0]
    assert again.duplicate_of == 1 and again.num_read == 0
    assert rows(db, "SELECT count(*) FROM requests") == [(1,)]
    assert rows(db, "SELECT count(*) FROM sources") == [(1,)]


def test_duplicate_ids_within_and_across_files(tmp_path, db):
    one = write_jsonl(
        tmp_path / "1.jsonl",
        [
            {"request_id": "a", "prompt_token_ids": [1]},
            {"request_id": "a", "prompt_token_ids": [2]},
        ],
    )
    two = write_jsonl(tmp_path / "2.jsonl", [{"request_id": "a", "prompt_token_ids": [3]}])
    result = ingest([one, two], db_path=db)
    assert result.num_stored == 1 and result.num_rejected == 2
    assert rows(db, "SELECT path, line_no, field, reason FROM rejects ORDER BY source_id") == [
        (str(one), 2, "request_id", "duplicate 'a', first seen at line 1"),
        (str(two), 1, "request_id", f"duplicate 'a', first seen at {one}:1"),
    ]


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst"])
def test_compressed_jsonl(tmp_path, db, suffix):
    data = b'{"request_id": "a", "prompt_token_ids": [1, 2]}\n'
    path = tmp_path / f"t{suffix}"
    if suffix.endswith("gz"):
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(zstandard.ZstdCompressor().compress(data))
    assert ingest([path], db_path=db).num_stored == 1


def test_truncated_gzip_is_a_file_error_and_leaves_nothing(tmp_path, db):
    data = gzip.compress(b'{"request_id": "a", "prompt_token_ids": [1, 2]}\n' * 1000)
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputFileError, match="cannot be read"):
        ingest([path], db_path=db)
    assert rows(db, "SELECT count(*) FROM requests") == [(0,)]
    assert rows(db, "SELECT count(*) FROM sources") == [(0,)]


ZST_DATA = b"".join(
    b'{"request_id": "r%d", "prompt_token_ids": [1, %d]}\n' % (i, i) for i in range(5000)
)
ZST = zstandard.ZstdCompressor(level=6).compress(ZST_DATA)


def _corrupt(blob: bytes) -> bytes:
    broken = bytearray(blob)
    broken[40:60] = b"\xff" * 20
    return bytes(broken)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (ZST[: len(ZST) * 6 // 10], "truncated zstd stream: the file ends inside a frame"),
        (ZST[:2], "truncated zstd stream: the file ends inside a frame"),
        (b"", "truncated zstd stream: the file ends inside a frame"),
        (ZST + ZST[:10], "truncated zstd stream: the file ends inside a frame"),
        (
            _corrupt(ZST),
            "corrupt zstd stream at the start (zstd decompressor error: Data corruption detected)",
        ),
    ],
    ids=["cut-at-60%", "cut-at-the-start", "empty", "second-frame-cut", "corrupt"],
)
def test_a_truncated_or_corrupt_zstd_file_is_an_error_and_stores_nothing(
    tmp_path, db, blob, message
):
    """(issue 13, item 4: a cut .zst was read as a shorter trace, a corrupt one a traceback)"""
    path = tmp_path / "t.jsonl.zst"
    path.write_bytes(blob)
    with pytest.raises(InputFileError, match=re.escape(message)):
        ingest([path], db_path=db)
    assert rows(db, "SELECT count(*) FROM requests") == [(0,)]
    assert rows(db, "SELECT count(*) FROM sources") == [(0,)]


def test_a_zstd_file_of_several_frames_is_read_whole(tmp_path, db):
    path = tmp_path / "t.jsonl.zst"
    tail = zstandard.ZstdCompressor().compress(b'{"request_id": "z", "prompt_token_ids": [7]}\n')
    path.write_bytes(ZST + tail)
    assert ingest([path], db_path=db).num_stored == 5001


def test_parquet_fast_and_exact_paths(tmp_path, db):
    good = pa.table(
        {
            "request_id": ["a", "b"],
            "prompt_token_ids": pa.array([[1, 2], [3]], pa.list_(pa.int32())),
            "timestamp": pa.array([0, 1_000_000], pa.timestamp("us", tz="UTC")),
        }
    )
    pq.write_table(good, tmp_path / "good.parquet")
    bad = pa.table({"request_id": ["c", "d"], "prompt_token_ids": [[1], [-5]], "note": ["x", None]})
    pq.write_table(bad, tmp_path / "bad.parquet")
    result = ingest([tmp_path / "good.parquet", tmp_path / "bad.parquet"], db_path=db)
    assert (result.num_stored, result.num_rejected) == (3, 1)
    assert rows(db, "SELECT request_id, timestamp_s, extra FROM requests ORDER BY request_id") == [
        ("a", 0.0, None),
        ("b", 1.0, None),
        ("c", None, '{"note":"x"}'),
    ]
    assert rows(db, "SELECT line_no, field FROM rejects") == [(2, "prompt_token_ids[0]")]


# (column, Parquet values of the wrong kind, the reject), each also written as JSON Lines:
# a typed column is read as strictly as JSON (no integer request ids, no boolean tokens).
WRONG_KIND = [
    ("request_id", pa.array([1, 2]), "request_id", "expected a string, got integer"),
    (
        "prompt_token_ids",
        pa.array([[True], [False]]),
        "prompt_token_ids[0]",
        "expected an integer, got boolean",
    ),
    ("replica", pa.array([1.5, 2.0]), "replica", "expected a string, got number"),
    ("prompt_family", pa.array([b"x", b"y"]), "prompt_family", "expected a string, got bytes"),
]


@pytest.mark.parametrize(("column", "values", "field", "reason"), WRONG_KIND)
def test_parquet_validates_as_json_lines_does(tmp_path, db, column, values, field, reason):
    base = {"request_id": pa.array(["a", "b"]), "prompt_token_ids": pa.array([[1, 2], [3]])}
    table = pa.table({**base, column: values})
    pq.write_table(table, tmp_path / "t.parquet")
    result = ingest([tmp_path / "t.parquet"], db_path=db)
    assert (result.num_stored, result.num_rejected) == (0, 2)
    assert rows(db, "SELECT line_no, field, reason FROM rejects ORDER BY line_no") == [
        (1, field, reason),
        (2, field, reason),
    ]
    if column != "prompt_family":  # JSON has no bytes
        lines = [orjson.dumps(r) for r in table.to_pylist()]
        other = tmp_path / "other.duckdb"
        ingest([_lines_file(tmp_path / "t.jsonl", lines)], db_path=other)
        assert rows(other, "SELECT field, reason FROM rejects") == [(field, reason)] * 2


def test_parquet_widening_casts_stay_on_the_fast_path(tmp_path, db):
    """Narrower integers and large strings are read as they are (nothing rejected)."""
    table = pa.table(
        {
            "request_id": pa.array(["a", "b"], pa.large_string()),
            "prompt_token_ids": pa.array([[1, 2], [3]], pa.list_(pa.int16())),
            "timestamp": pa.array([1, 2], pa.int32()),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    result = ingest([tmp_path / "t.parquet"], db_path=db)
    assert (result.num_stored, result.num_rejected) == (2, 0)
    assert rows(db, "SELECT request_id, timestamp_s FROM requests ORDER BY 1") == [
        ("a", 1.0),
        ("b", 2.0),
    ]


def test_csv(tmp_path, db):
    path = tmp_path / "t.csv"
    path.write_text(
        "request_id,timestamp,prompt_token_ids,output_tokens,model_revision,route\n"
        "a,1.5,1 2 3,4,m1,/chat\n"
        'b,,"[4, 5]",,,\n'
        "c,2,1 x 3,,,\n"
        "d,2,1,,\n"
    )
    result = ingest([path], db_path=db)
    assert (result.num_stored, result.num_rejected) == (2, 2)
    assert rows(
        db,
        "SELECT request_id, timestamp_s, prompt_token_ids, output_tokens, extra "
        "FROM requests ORDER BY request_id",
    ) == [("a", 1.5, [1, 2, 3], 4, '{"route":"/chat"}'), ("b", None, [4, 5], None, None)]
    assert rows(db, "SELECT line_no, field, reason FROM rejects ORDER BY line_no") == [
        (4, "prompt_token_ids[1]", "expected an integer, got 'x'"),
        (5, None, "row has 5 fields, the header has 6"),
    ]


def test_csv_numbers_no_float_holds_name_their_field(tmp_path, db):
    """A cell past the largest float (1e400) said 'inf is not a finite number'."""
    path = tmp_path / "t.csv"
    path.write_text(
        "request_id,timestamp,prompt_token_ids,ttft_ms\n"
        "a,1e400,1,\n"
        "b,-Infinity,1,\n"
        "c,1,1,NaN\n"
        "d,1,1,2.5\n"
    )
    result = ingest([path], db_path=db)
    assert (result.num_read, result.num_stored, result.num_rejected) == (4, 1, 3)
    assert rows(db, "SELECT line_no, field, reason FROM rejects ORDER BY line_no") == [
        (2, "timestamp", "1e400 is outside the range of a float (-1.8e308 to 1.8e308)"),
        (3, "timestamp", "-Infinity is not a finite number"),
        (4, "ttft_ms", "NaN is not a finite number"),
    ]


def test_not_json_lines_at_all(tmp_path, db):
    path = tmp_path / "t.jsonl"
    path.write_text("request_id,prompt\nx,1 2\n")
    with pytest.raises(InputFileError, match=r"not JSON Lines \(line 1: malformed JSON"):
        ingest([path], db_path=db)
    assert rows(db, "SELECT count(*) FROM rejects") == [(0,)]
    array = tmp_path / "a.json"
    array.write_text('[\n  {"request_id": "a"}\n]\n')
    with pytest.raises(InputFileError, match="a JSON array, not JSON Lines"):
        ingest([array], db_path=db)


def test_batches_keep_line_numbers(tmp_path, db, monkeypatch):
    import analyzer.traces.readers as readers

    monkeypatch.setattr(readers, "BATCH_BYTES", 64)
    records = [
        {"request_id": f"r{i}", "prompt_token_ids": [i % 7 + 1] * (i % 5 + 1)} for i in range(40)
    ]
    records[17] = {"request_id": "bad", "prompt_token_ids": []}
    path = write_jsonl(tmp_path / "t.jsonl", records)
    result = ingest([path], db_path=db)
    assert (result.num_stored, result.num_rejected) == (39, 1)
    assert rows(db, "SELECT line_no FROM rejects") == [(18,)]
    assert rows(db, "SELECT min(line_no), max(line_no), count(DISTINCT line_no) FROM requests") == [
        (1, 40, 39)
    ]


GOOD = '{{"request_id": "{rid}", "prompt_token_ids": [1, {n}]}}'
BAD = [
    "{{broken",
    '{{"request_id": "{rid}", "prompt_token_ids": []}}',
    '{{"request_id": "{rid}", "prompt_token_ids": [-{n}]}}',
    '{{"request_id": {n}, "prompt_token_ids": [1]}}',
    '{{"request_id": "{rid}", "block_hash_ids": [{n}]}}',
    '{{"request_id": "{rid}"}}',
]


@st.composite
def mixtures(draw):
    """Lines of one or two files: good records, bad records, repeated ids, blank lines."""
    files = []
    for _ in range(draw(st.integers(1, 2))):
        lines = []
        for _ in range(draw(st.integers(0, 30))):
            rid = f"r{draw(st.integers(0, 25))}"  # small id space: duplicates happen
            n = draw(st.integers(0, 9))
            kind = draw(st.integers(0, 9))
            if kind < 6:
                lines.append(GOOD.format(rid=rid, n=n))
            elif kind < 9:
                lines.append(draw(st.sampled_from(BAD)).format(rid=rid, n=n + 1))
            else:
                lines.append("")
        files.append(lines)
    return files


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixtures(), st.sampled_from([64, 300, 1 << 20]))
def test_read_equals_stored_plus_rejected(files, batch_bytes):
    import analyzer.traces.readers as readers

    saved = readers.BATCH_BYTES
    readers.BATCH_BYTES = batch_bytes
    try:
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for i, lines in enumerate(files):
                path = Path(tmp) / f"{i}.jsonl"
                path.write_text(
                    "".join(line + "\n" for line in lines)
                    + f'{{"request_id": "tail{i}", "prompt_token_ids": [9]}}\n'
                )
                paths.append(path)
            db = Path(tmp) / "t.duckdb"
            result = ingest(paths, db_path=db)
            expected_read = sum(sum(1 for line in lines if line) + 1 for lines in files)
            assert result.num_read == expected_read
            assert result.num_read == result.num_stored + result.num_rejected
            assert rows(db, "SELECT count(*) FROM requests") == [(result.num_stored,)]
            assert rows(db, "SELECT count(*) FROM rejects") == [(result.num_rejected,)]
            assert rows(db, "SELECT sum(num_read) FROM sources") == [(result.num_read,)]
            good_ids = {
                line.split('"')[3]
                for lines in files
                for line in lines
                if line.startswith('{"request_id": "') and "[1, " in line
            }
            stored = {r[0] for r in rows(db, "SELECT request_id FROM requests")}
            assert stored == good_ids | {f"tail{i}" for i in range(len(files))}
    finally:
        readers.BATCH_BYTES = saved


def test_a_file_a_wrong_format_stored_nothing_of_can_be_ingested_again(tmp_path, db):
    """(issue 13, item 6: its sha256 was recorded and a later ingest said "identical")"""
    path = write_jsonl(tmp_path / "t.jsonl", [{"request_id": "a", "prompt_token_ids": [1, 2]}])
    wrong = ingest([path], db_path=db, fmt="mooncake")
    assert (wrong.num_stored, wrong.num_rejected) == (0, 1)
    right = ingest([path], db_path=db, fmt="jsonl")
    assert right.num_stored == 1
    assert rows(db, "SELECT format, num_stored FROM sources") == [("jsonl", 1)]
    assert rows(db, "SELECT count(*) FROM rejects") == [(0,)]
    again = ingest([path], db_path=db)  # now a duplicate, whatever the format
    assert again.sources[0].duplicate_of is not None and again.num_stored == 0


def test_a_failed_first_ingest_leaves_no_database(tmp_path):
    """(issue 13, item 11: the database file was created although ingest failed with exit 2)"""
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json at all\n")
    new = tmp_path / "new.duckdb"
    with pytest.raises(InputFileError, match="not JSON Lines"):
        ingest([bad], db_path=new, fmt="jsonl")
    assert not new.exists() and not new.with_name("new.duckdb.wal").exists()
    good = write_jsonl(tmp_path / "t.jsonl", [{"request_id": "a", "prompt_token_ids": [1]}])
    ingest([good], db_path=new)
    with pytest.raises(InputFileError):
        ingest([bad], db_path=new, fmt="jsonl")
    assert rows(new, "SELECT count(*) FROM requests") == [(1,)]  # an existing store stays


def _lines_file(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _record(i: int, **fields) -> bytes:
    values = {"request_id": f"r{i}", "prompt_token_ids": [1, 2, i + 3], **fields}
    return orjson.dumps(values)


# (field with a bad byte, how the batch is read): the fast path reads whole batches with
# Arrow; an unknown field elsewhere in the batch sends it to the per-record path.
BAD_UTF8 = [
    (field, path)
    for field in ("request_id", "prompt_family", "replica", "model_revision")
    for path in ("fast", "per record")
]


@pytest.mark.parametrize(("field", "path"), BAD_UTF8)
def test_one_invalid_utf8_byte_costs_one_record(tmp_path, db, field, path):
    lines = [_record(i, prompt_family="fam", replica="r0", model_revision="v1") for i in range(6)]
    lines[3] = lines[3].replace(b'"r3"' if field == "request_id" else b'"fam"', b'"x\xffy"')
    if field in ("replica", "model_revision"):
        lines[3] = _record(3, **{field: "PLACE"}).replace(b"PLACE", b"x\xffy")
    if path == "per record":
        lines[0] = _record(0, note="an unknown field")
    result = ingest([_lines_file(tmp_path / "t.jsonl", lines)], db_path=db)
    assert (result.num_stored, result.num_rejected) == (5, 1)
    at = lines[3].index(0xFF) + 1
    assert rows(db, "SELECT line_no, reason FROM rejects") == [
        (4, f"malformed JSON (not valid UTF-8: byte 0xff at byte {at})")
    ]


@pytest.mark.parametrize("path", ["fast", "per record"])
def test_a_byte_order_mark_opens_a_file_on_either_path(tmp_path, db, path):
    """A BOM at the start is ignored (RFC 8259 allows it); one opening a later line makes
    that line not JSON."""
    lines = [_record(i) for i in range(4)]
    if path == "per record":
        lines[1] = _record(1, note="an unknown field")
    lines[0] = b"\xef\xbb\xbf" + lines[0]
    lines[2] = b"\xef\xbb\xbf" + lines[2]
    result = ingest([_lines_file(tmp_path / "t.jsonl", lines)], db_path=db)
    assert (result.num_stored, result.num_rejected) == (3, 1)
    assert rows(db, "SELECT line_no FROM rejects") == [(3,)]


@pytest.mark.parametrize("path", ["fast", "per record"])
def test_a_timestamp_past_the_years_rfc3339_writes_costs_its_record(tmp_path, db, path):
    """(issue 13, item 9: timestamps of +-1e300 were stored and `hpa report` overflowed)"""
    lines = [_record(i, timestamp=float(i)) for i in range(4)]
    lines[1] = _record(1, timestamp=1e300)
    lines[2] = _record(2, timestamp=-1e300)
    if path == "per record":
        lines[0] = _record(0, note="an unknown field")
    result = ingest([_lines_file(tmp_path / "t.jsonl", lines)], db_path=db)
    assert (result.num_stored, result.num_rejected) == (2, 2)
    assert rows(db, "SELECT line_no, field FROM rejects ORDER BY line_no") == [
        (2, "timestamp"),
        (3, "timestamp"),
    ]


REPEATED = [
    (b'{"request_id": "r1", "prompt_token_ids": [1, 2], "request_id": "r9"}', "request_id"),
    (b'{"request_id": "r1", "prompt_token_ids": [1], "prompt_token_ids": [2]}', "prompt_token_ids"),
    (b'{"request_id": "r1", "prompt_token_ids": [1, 2], "x": {"a": 1, "a": 2}}', "a"),
    (b'{"request_id": "r1", "prompt_token_ids": [1, 2], "replica" :"a", "replica":"b"}', "replica"),
]


@pytest.mark.parametrize(("line", "key"), REPEATED)
@pytest.mark.parametrize("path", ["fast", "per record"])
def test_a_key_given_twice_costs_its_record(tmp_path, db, line, key, path):
    """(issue 13, item 11: the parser kept the last value silently, on either path)"""
    lines = [_record(0), line, _record(2, prompt_family="a:b", replica='x":y')]
    if path == "per record":
        lines.append(_record(3, note="an unknown field"))
    result = ingest([_lines_file(tmp_path / "t.jsonl", lines)], db_path=db)
    assert result.num_rejected == 1 and result.num_stored == len(lines) - 1
    assert rows(db, "SELECT line_no, field, reason FROM rejects") == [
        (2, key, "given twice in one JSON object (which value counts is undefined)")
    ]


def test_look_alikes_of_a_repeated_key_are_stored(tmp_path, db):
    """Null values, colons and quotes in strings, nested objects: more key marks than
    fields, but no key given twice."""
    lines = [
        _record(0, prompt_family=None, replica='a" : b'),
        _record(1, timestamp="2026-01-01T10:00:00Z"),
        _record(2, x={"a": {"a": 1}}, y=[{"a": 1}, {"a": 2}]),
    ]
    result = ingest([_lines_file(tmp_path / "t.jsonl", lines)], db_path=db)
    assert (result.num_stored, result.num_rejected) == (3, 0)


def test_integers_past_64_bits_stay_exact(tmp_path, db):
    """(issue 13, item 11: orjson read them as floats, so extra held 1.2345678901234568e+29)"""
    big = 123456789012345678901234567890
    lines = [
        b'{"request_id": "r0", "prompt_token_ids": [1, 2], "n": %d, "m": -%d}' % (big, big),
        b'{"request_id": "r1", "prompt_token_ids": [1, %d]}' % big,
        _record(2, s="12345678901234567890123"),
    ]
    result = ingest([_lines_file(tmp_path / "t.jsonl", lines)], db_path=db)
    assert (result.num_stored, result.num_rejected) == (2, 1)
    assert rows(db, "SELECT extra FROM requests ORDER BY line_no") == [
        (f'{{"m":-{big},"n":{big}}}',),
        ('{"s":"12345678901234567890123"}',),
    ]
    assert rows(db, "SELECT field, reason FROM rejects") == [
        ("prompt_token_ids[1]", f"{big} is outside [0, 2^31)")  # not "got number"
    ]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_what_is_not_a_regular_file_says_what_it_is(tmp_path, db):
    """(issue 13, item 11: a FIFO and a symlink loop were "no such file")"""
    fifo, loop = tmp_path / "pipe", tmp_path / "loop"
    os.mkfifo(fifo)
    loop.symlink_to(loop)
    cases = [
        (
            fifo,
            "a pipe, not a file: ingest reads a file twice (its sha256, then its records); "
            "save the stream to a file first",
        ),
        (loop, "a loop of symbolic links"),
        (tmp_path / "missing.jsonl", "no such file"),
    ]
    for path, why in cases:
        with pytest.raises(InputFileError) as info:
            ingest([path], db_path=db)
        assert str(info.value) == f"{path}: {why}"


def test_one_invalid_utf8_string_in_parquet_costs_its_row(tmp_path, db):
    """(a Parquet writer need not check its strings; the whole file was a decode error)"""
    as_text = lambda values: pa.array(values, pa.binary()).view(pa.string())  # noqa: E731
    table = pa.table(
        {
            "request_id": as_text([b"a", b"b\xffc", b"d"]),
            "prompt_token_ids": pa.array([[1, 2], [3], [4]], pa.list_(pa.int32())),
            "prompt_family": as_text([b"x", b"y", b"z\xfe"]),
        }
    )
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    result = ingest([path], db_path=db)
    assert (result.num_stored, result.num_rejected) == (1, 2)
    assert rows(db, "SELECT line_no, field, reason FROM rejects ORDER BY line_no") == [
        (2, "request_id", "not valid UTF-8 (byte 0xff at byte 2)"),
        (3, "prompt_family", "not valid UTF-8 (byte 0xfe at byte 2)"),
    ]


def test_a_csv_header_that_is_not_utf8_is_a_file_error(tmp_path, db):
    path = tmp_path / "h.csv"
    path.write_bytes(b"request_id,prompt_token_ids\xff\na,1 2\n")
    with pytest.raises(InputFileError, match=r"h.csv:1: the CSV header is not valid UTF-8$"):
        ingest([path], db_path=db)


def test_a_directory_stands_for_the_files_in_it(tmp_path, db):
    """(issue 14, item 10: ingesting a directory was refused)"""
    folder = tmp_path / "traces"
    folder.mkdir()
    for name in ("b.jsonl", "a.jsonl"):
        write_jsonl(folder / name, [{"request_id": name, "prompt_token_ids": [1, 2]}])
    (folder / ".hidden.jsonl").write_text("not json\n")
    (folder / "nested").mkdir()
    result = ingest([folder], db_path=db)
    assert [Path(s.path).name for s in result.sources] == ["a.jsonl", "b.jsonl"]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.md").write_text("not a trace\n")
    with pytest.raises(InputFileError, match=r"empty: a directory with no trace files in it \("):
        ingest([empty], db_path=db)
    (folder / "notes.md").write_text("x\n")
    assert ingest([folder], db_path=db).skipped_files == (
        (str(folder / "notes.md"), "not named like a trace file (give it by name to read it)"),
    )


def _stored(db: Path) -> list[tuple]:
    return rows(
        db,
        "SELECT request_id, line_no, arrival_seq, prompt_token_ids, output_token_ids "
        "FROM requests ORDER BY line_no",
    ) + rows(db, "SELECT line_no, field, reason FROM rejects ORDER BY line_no")


@pytest.mark.parametrize("unit_rows", [1, 4, 1000])
def test_write_units_merge_batches_without_changing_what_is_stored(
    tmp_path, monkeypatch, unit_rows
):
    """Small reader batches (fast and exact ones: a bad line and a duplicate among them)
    merged into write units store what one batch per record would."""
    from analyzer.store import write_units as ingest_module
    from analyzer.traces import readers

    records = [{"request_id": f"r{i}", "prompt_token_ids": [i, i + 1]} for i in range(40)]
    records[17] = {"request_id": "bad", "prompt_token_ids": []}
    records[23] = {"request_id": "r5", "prompt_token_ids": [5], "output_token_ids": [1]}
    path = write_jsonl(tmp_path / "t.jsonl", records)
    monkeypatch.setattr(readers, "BATCH_BYTES", 1)  # one line a batch
    monkeypatch.setattr(ingest_module, "WRITE_UNIT_ROWS", 1)
    ingest([path], db_path=tmp_path / "one.duckdb")
    monkeypatch.setattr(readers, "BATCH_BYTES", 200)  # a few lines a batch
    monkeypatch.setattr(ingest_module, "WRITE_UNIT_ROWS", unit_rows)
    result = ingest([path], db_path=tmp_path / "merged.duckdb")
    assert (result.num_stored, result.num_rejected) == (38, 2)
    assert _stored(tmp_path / "merged.duckdb") == _stored(tmp_path / "one.duckdb")


GZ_DATA = b"".join(
    b'{"request_id": "g%d", "prompt_token_ids": [1, %d]}\n' % (i, i) for i in range(2000)
)
GZ = gzip.compress(GZ_DATA, mtime=0)
CRC = zlib.crc32(GZ_DATA)


def _crc_flipped(blob: bytes) -> bytes:
    broken = bytearray(blob)
    broken[-6] ^= 0xFF  # the CRC-32 of the trailer
    return bytes(broken)


def _decodable(blob: bytes) -> bytes:
    """What zlib itself decodes of a cut gzip stream: the bytes before the damage."""
    return zlib.decompressobj(31).decompress(blob)


@pytest.mark.parametrize(
    ("blob", "cause"),
    [
        (GZ[:-4], "Compressed file ended before the end-of-stream marker was reached"),
        (_crc_flipped(GZ), f"CRC check failed {hex(CRC ^ 0xFF0000)} != {hex(CRC)}"),
        (GZ[: len(GZ) // 2], "Compressed file ended before the end-of-stream marker was reached"),
        (GZ[:20], "Compressed file ended before the end-of-stream marker was reached"),
        (GZ[:60], "Compressed file ended before the end-of-stream marker was reached"),
    ],
    ids=["cut-trailer", "wrong-crc", "cut-in-half", "cut-at-the-start", "cut-in-line-1"],
)
def test_damage_in_a_gzip_file_is_reported_where_it_is(tmp_path, db, blob, cause):
    """(issue 48, item 5: damage at the end was reported "at the start": the place was the
    records stored so far, none while the first 8 MiB batch was read.) The lines before the
    damage are counted as they were read, each read one step of the decompressor."""
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(blob)
    good = GZ_DATA if blob == _crc_flipped(GZ) else _decodable(blob)
    num_lines = good.count(b"\n")
    line = f"after line {num_lines:,}" if good.endswith(b"\n") else f"in line {num_lines + 1:,}"
    where = f"{line} (byte {len(good):,} of its decompressed content)" if good else "at the start"
    with pytest.raises(InputFileError) as caught:
        ingest([path], db_path=db)
    assert str(caught.value) == f"{path}: cannot be read {where} ({cause})"
    assert rows(db, "SELECT count(*) FROM requests") == [(0,)]


def test_a_file_whose_every_record_is_stored_already_says_so(tmp_path, db):
    """(issue 48, item 5: such a file was asked whether it is "a trace of another format")"""
    from click.testing import CliRunner

    from analyzer.cli import cli

    records = [{"request_id": f"d{i}", "prompt_token_ids": [1, i]} for i in range(30)]
    first = write_jsonl(tmp_path / "first.jsonl", records)
    again = write_jsonl(tmp_path / "again.jsonl", [*records[::-1], ""])  # other bytes
    mixed = write_jsonl(tmp_path / "mixed.jsonl", [*records[:2], "{not json"])
    runner = CliRunner()
    assert runner.invoke(cli, ["ingest", str(first), "--db", str(db)]).exit_code == 0
    cases = [
        (again, "every one of its 30 records duplicates a request stored before (same "
         "request_id): the file adds nothing"),
        (mixed, "none of its records was stored: 2 duplicate requests stored before, 1 "
         "rejected otherwise"),
    ]  # fmt: skip
    for path, line in cases:
        result = runner.invoke(cli, ["ingest", str(path), "--db", str(db)])
        assert result.exit_code == 1
        assert result.stderr.splitlines()[-1] == f"  {line}"
        assert "another format" not in result.stderr


def test_rejects_are_stored_in_one_statement_not_one_a_row(tmp_path, db, monkeypatch):
    """A file of many rejects (a CSV given --format mooncake: 19,367 lines) took 57 s, 11 of
    12 s of CPU in DuckDB's executemany, which runs its INSERT once a row (3.7 ms a reject):
    the rejects of a batch are one INSERT ... SELECT from an Arrow table, the same rows."""
    import analyzer.store.ingest as ingest_module

    calls: list[str] = []

    class Counting:
        def __init__(self, con):
            self._con = con

        def __getattr__(self, name):
            calls.append(name)
            return getattr(self._con, name)

    opened = ingest_module.connect
    monkeypatch.setattr(ingest_module, "connect", lambda *a, **k: Counting(opened(*a, **k)))
    lines = [
        "{bad",
        '{"request_id": "a", "prompt_token_ids": "x"}',
        *[f"not json {i}" for i in range(300)],
    ]
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    result = ingest([path], db_path=db)
    assert (result.num_read, result.num_stored, result.num_rejected) == (302, 0, 302)
    assert "executemany" not in calls
    stored = rows(db, "SELECT line_no, field, reason FROM rejects ORDER BY line_no")
    assert len(stored) == 302 and [r[0] for r in stored] == list(range(1, 303))
    assert stored[1][1] == "prompt_token_ids" and stored[0][1] is None
    assert rows(db, "SELECT DISTINCT path FROM rejects") == [(str(path),)]


def test_a_file_name_that_is_not_utf8_is_one_line_before_anything_is_stored(tmp_path, db):
    """A name with a byte that is no UTF-8 (Latin-1 'é' = 0xE9) could be read but not
    stored (DuckDB keeps text as UTF-8): ingest gave a traceback at its sources row, or at
    its first reject."""
    from click.testing import CliRunner

    from analyzer.cli import cli

    folder = os.fsencode(tmp_path)
    good = os.fsdecode(folder + b"/good.jsonl")
    write_jsonl(Path(good), [{"request_id": "a", "prompt_token_ids": [1, 2]}])
    bad = os.fsdecode(folder + b"/caf\xe9.jsonl")
    write_jsonl(Path(bad), [{"request_id": "b", "prompt_token_ids": [1, 3]}, "{bad"])
    shown = f"{tmp_path}/caf\\xe9.jsonl"
    with pytest.raises(InputFileError) as caught:
        ingest([good, bad], db_path=db)
    assert str(caught.value) == (
        f"{shown}: the file name is not UTF-8 (the store keeps each file's name as text); "
        "rename the file"
    )
    assert rows(db, "SELECT count(*) FROM sources") == [(0,)]
    result = CliRunner().invoke(cli, ["ingest", str(tmp_path), "--db", str(db)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"Error: {str(caught.value)}"]
