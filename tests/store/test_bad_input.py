"""One bad value costs one record, the same on every reader path and format (issue 13).

Each case is a record that differs from its good neighbours in one value; it is written as
JSON Lines read on the fast (Arrow) path, as JSON Lines read record by record (an unknown
field elsewhere in the batch), as Parquet and as CSV, and must be the one reject, with the
same field and reason, while its neighbours are stored. JSON-only cases (bytes of the line
itself) are at the end; the single-format ones live beside their reader's tests.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyzer.store.ingest import ingest

NAN, INF = float("nan"), float("inf")
YEARS = (
    "s is outside years 0000-9999 (-62,167,219,200 to 253,402,300,799 s, what RFC 3339 can write)"
)
# (name, what the good rows share, the bad row's values, field, reason); OTHERWISE: where a
# format says it differently, for a reason of its own.
CASES = [
    (
        "negative token",
        {},
        {"prompt_token_ids": [1, -1]},
        "prompt_token_ids[1]",
        "-1 is outside [0, 2^31)",
    ),
    (
        "token past int32",
        {},
        {"prompt_token_ids": [2**31]},
        "prompt_token_ids[0]",
        "2147483648 is outside [0, 2^31)",
    ),
    (
        "empty prompt",
        {},
        {"prompt_token_ids": []},
        "prompt_token_ids",
        "empty array (a request needs at least one token)",
    ),
    (
        "timestamp past year 9999",
        {"timestamp": 1.0},
        {"timestamp": 1e300},
        "timestamp",
        "1e+300 " + YEARS,
    ),
    (
        "timestamp not RFC 3339",
        {"timestamp": "2024-01-01T00:00:00Z"},
        {"timestamp": "2024-01-01 00:00:00Z"},
        "timestamp",
        "'2024-01-01 00:00:00Z' is not an RFC 3339 date-time",
    ),
    (
        "output count disagrees",
        {"output_token_ids": [5], "output_tokens": 1},
        {"output_token_ids": [5], "output_tokens": 2},
        "output_tokens",
        "2 but output_token_ids has 1",
    ),
    ("negative ttft", {"ttft_ms": 1.0}, {"ttft_ms": -3.0}, "ttft_ms", "-3.0 is negative"),
    (
        "cached past the prompt",
        {"cached_tokens": 0},
        {"cached_tokens": 9},
        "cached_tokens",
        "9 is more than prompt_tokens (3)",
    ),
    ("duplicate request id", {}, {"request_id": "r0"}, "request_id", "duplicate 'r0'"),
    (
        "string not UTF-8",
        {"prompt_family": b"chat"},
        {"prompt_family": b"ch\xffat"},
        "prompt_family",
        "not valid UTF-8 (byte 0xff at byte 3)",
    ),
    # JSON Lines write these NaN and Infinity (Python's json), which orjson refuses: the line
    # was rejected as 'malformed JSON' with no field
    (
        "timestamp NaN",
        {"timestamp": 1.0},
        {"timestamp": NAN},
        "timestamp",
        "nan is not a finite number",
    ),
    (
        "timestamp infinite",
        {"timestamp": 1.0},
        {"timestamp": INF},
        "timestamp",
        "inf is not a finite number",
    ),
    ("ttft NaN", {"ttft_ms": 1.0}, {"ttft_ms": NAN}, "ttft_ms", "nan is not a finite number"),
]
FORMATS = ("jsonl fast", "jsonl per record", "parquet", "csv")
NOT_JSON = (None, "malformed JSON (not valid UTF-8: byte 0xff at byte")  # RFC 8259: UTF-8
OTHERWISE = {
    # An empty CSV cell is an absent value.
    ("empty prompt", "csv"): ("prompt_token_ids", "missing (give prompt_token_ids"),
    # JSON text must be UTF-8 as a whole: the line is not JSON.
    ("string not UTF-8", "jsonl fast"): NOT_JSON,
    ("string not UTF-8", "jsonl per record"): NOT_JSON,
    # JSON Lines say the value as the line writes it
    **{
        (name, fmt): (field, f"{text} is not a finite number")
        for name, field, text in (
            ("timestamp NaN", "timestamp", "NaN"),
            ("timestamp infinite", "timestamp", "Infinity"),
            ("ttft NaN", "ttft_ms", "NaN"),
        )
        for fmt in ("jsonl fast", "jsonl per record")
    },
}


def _rows(case_good: dict, case_bad: dict) -> list[dict]:
    rows = [
        {"request_id": f"r{i}", "prompt_token_ids": [1, 2, i + 3], **case_good} for i in range(4)
    ]
    rows[1] = {**rows[1], **case_bad}
    return rows


def _jsonl(rows: list[dict], path: Path, per_record: bool) -> Path:
    lines = []
    for k, row in enumerate(rows):
        text = {
            k: v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v
            for k, v in row.items()
        }
        if per_record and k == 3:
            text["note"] = "an unknown field sends the batch record by record"
        if any(isinstance(v, float) and not math.isfinite(v) for v in row.values()):
            lines.append(json.dumps(text).encode())  # NaN, Infinity: orjson writes null
            continue
        lines.append(
            orjson.dumps(text, option=orjson.OPT_PASSTHROUGH_SUBCLASS)
            if not any(isinstance(v, bytes) for v in row.values())
            else _raw_json(row, text.get("note"))
        )
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _raw_json(row: dict, note: str | None) -> bytes:
    """A JSON line holding raw bytes (not necessarily UTF-8) in its byte-string values."""
    parts = []
    for key, value in {**row, **({"note": note} if note else {})}.items():
        body = b'"' + value + b'"' if isinstance(value, bytes) else orjson.dumps(value)
        parts.append(orjson.dumps(key) + b": " + body)
    return b"{" + b", ".join(parts) + b"}"


def _parquet(rows: list[dict], path: Path) -> Path:
    columns = {}
    for name in rows[0]:
        values = [r[name] for r in rows]
        if isinstance(values[0], bytes):  # strings a writer did not check
            columns[name] = pa.array(values, pa.binary()).view(pa.string())
        else:
            columns[name] = pa.array(values)
    pq.write_table(pa.table(columns), path)
    return path


def _csv(rows: list[dict], path: Path) -> Path:
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(list(rows[0]))
    for row in rows:
        writer.writerow(
            [
                " ".join(map(str, v))
                if isinstance(v, list)
                else v.decode("utf-8", "surrogateescape")
                if isinstance(v, bytes)
                else repr(v)
                if isinstance(v, float)
                else v
                for v in row.values()
            ]
        )
    path.write_bytes(out.getvalue().encode("utf-8", "surrogateescape"))
    return path


def _write(fmt: str, rows: list[dict], where: Path) -> tuple[Path, int]:
    """The file and the line (row) number the bad record is at."""
    if fmt == "parquet":
        return _parquet(rows, where / "t.parquet"), 2
    if fmt == "csv":
        return _csv(rows, where / "t.csv"), 3  # after the header
    return _jsonl(rows, where / "t.jsonl", per_record=fmt == "jsonl per record"), 2


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    ("name", "good", "bad", "field", "reason"), CASES, ids=[c[0] for c in CASES]
)
def test_one_bad_value_costs_one_record(tmp_path, fmt, name, good, bad, field, reason):
    path, line = _write(fmt, _rows(good, bad), tmp_path)
    db = tmp_path / "s.duckdb"
    result = ingest([path], db_path=db)
    assert (result.num_read, result.num_stored, result.num_rejected) == (4, 3, 1)
    con = duckdb.connect(str(db), read_only=True)
    try:
        (got,) = con.execute("SELECT line_no, field, reason FROM rejects").fetchall()
    finally:
        con.close()
    field, reason = OTHERWISE.get((name, fmt), (field, reason))
    assert got[:2] == (line, field)
    assert got[2].startswith(reason), got[2]


# JSON Lines only: the bytes of the line itself. (line 2 of 4, the reject's field, reason)
RAW = [
    (
        "key given twice",
        b'{"request_id": "r1", "prompt_token_ids": [1], "prompt_token_ids": [2]}',
        "prompt_token_ids",
        "given twice in one JSON object (which value counts is undefined)",
    ),
    ("not JSON", b'{"request_id": "r1", ', None, "malformed JSON"),
    (
        "a byte order mark inside",
        b'\xef\xbb\xbf{"request_id": "r1", "prompt_token_ids": [1]}',
        None,
        "malformed JSON",
    ),
    ("not an object", b"[1, 2]", None, "expected a JSON object, got array"),
    # numbers JSON has not (RFC 8259), which orjson refuses: the field is named
    *(
        (f"timestamp {text}", b'{"request_id": "r1", "prompt_token_ids": [1], "timestamp": '
         + text.encode() + b"}", "timestamp", reason)
        for text, reason in (
            ("NaN", "NaN is not a finite number"),
            ("-Infinity", "-Infinity is not a finite number"),
            ("1e400", "1e400 is outside the range of a float (-1.8e308 to 1.8e308)"),
            ("-1e400", "-1e400 is outside the range of a float (-1.8e308 to 1.8e308)"),
        )
    ),
    (
        "ttft_ms past a float",
        b'{"request_id": "r1", "prompt_token_ids": [1], "ttft_ms": 2.5e999}',
        "ttft_ms",
        "2.5e999 is outside the range of a float (-1.8e308 to 1.8e308)",
    ),
    (
        "NaN in an unknown field",
        b'{"request_id": "r1", "prompt_token_ids": [1], "note": {"scores": [0.5, NaN]}}',
        "note.scores[1]",
        "NaN is not a finite number",
    ),
    ("NaN and not JSON", b'{"request_id": "r1", "timestamp": NaN, ', None, "malformed JSON"),
]  # fmt: skip


@pytest.mark.parametrize("per_record", [False, True], ids=["fast", "per record"])
@pytest.mark.parametrize(("name", "line", "field", "reason"), RAW, ids=[c[0] for c in RAW])
def test_one_bad_line_costs_one_record(tmp_path, per_record, name, line, field, reason):
    lines = [
        orjson.dumps({"request_id": f"r{i}", "prompt_token_ids": [1, i + 3]}) for i in range(4)
    ]
    lines[1] = line
    if per_record:
        lines[3] = orjson.dumps({"request_id": "r3", "prompt_token_ids": [6], "note": "x"})
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    db = tmp_path / "s.duckdb"
    result = ingest([path], db_path=db)
    assert (result.num_stored, result.num_rejected) == (3, 1)
    con = duckdb.connect(str(db), read_only=True)
    try:
        (got,) = con.execute("SELECT line_no, field, reason FROM rejects").fetchall()
    finally:
        con.close()
    assert got[:2] == (2, field) and got[2].startswith(reason)
