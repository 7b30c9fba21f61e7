"""The canonical record: each reject reason, table-driven, and agreement with the schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analyzer.traces.batches import exact_batch
from analyzer.traces.records import (
    INT64_MAX,
    INT64_MIN,
    Int64Ids,
    RecordError,
    parse_timestamp,
    type_name,
    validate_record,
)

SCHEMA = json.loads(
    (Path(__file__).parents[2] / "analyzer" / "schemas" / "trace.schema.json").read_text()
)
OK = {"request_id": "a", "prompt_token_ids": [1, 2]}

BAD = [
    # (record, field, reason, schema can tell)
    ([1, 2], None, "expected a JSON object, got array", True),
    ({"prompt_token_ids": [1]}, "request_id", "missing (required)", True),
    (
        {"request_id": 7, "prompt_token_ids": [1]},
        "request_id",
        "expected a string, got integer",
        True,
    ),
    ({"request_id": ""}, "request_id", "empty string", True),
    (
        {"request_id": "a"},
        "prompt_token_ids",
        "missing (give prompt_token_ids, or block_hash_ids with block_size)",
        True,
    ),
    (
        {"request_id": "a", "prompt_token_ids": []},
        "prompt_token_ids",
        "empty array (a request needs at least one token)",
        True,
    ),
    (
        {"request_id": "a", "prompt_token_ids": "1 2"},
        "prompt_token_ids",
        "expected an array of integers, got string",
        True,
    ),
    (
        {"request_id": "a", "prompt_token_ids": [1, "2"]},
        "prompt_token_ids[1]",
        "expected an integer, got string",
        True,
    ),
    (
        {"request_id": "a", "prompt_token_ids": [1, 2.0]},
        "prompt_token_ids[1]",
        "expected an integer, got number",
        False,
    ),  # JSON Schema counts 2.0 as an integer
    (
        {"request_id": "a", "prompt_token_ids": [True]},
        "prompt_token_ids[0]",
        "expected an integer, got boolean",
        True,
    ),
    (
        {"request_id": "a", "prompt_token_ids": [-1]},
        "prompt_token_ids[0]",
        "-1 is outside [0, 2^31)",
        True,
    ),
    (
        {"request_id": "a", "prompt_token_ids": [2**31]},
        "prompt_token_ids[0]",
        "2147483648 is outside [0, 2^31)",
        True,
    ),
    (
        {"request_id": "a", "block_hash_ids": [1]},
        "block_size",
        "missing (required with block_hash_ids)",
        True,
    ),
    (
        {"request_id": "a", "block_hash_ids": [1], "prompt_token_ids": [1], "block_size": 4},
        "block_hash_ids",
        "give prompt_token_ids or block_hash_ids, not both",
        True,
    ),
    (
        {"request_id": "a", "block_hash_ids": [1, 2], "block_size": 16, "prompt_tokens": 40},
        "prompt_tokens",
        "40 tokens need 3 blocks of 16, block_hash_ids has 2",
        False,
    ),
    (
        {"request_id": "a", "block_hash_ids": [1], "block_size": 0},
        "block_size",
        "0 is outside [1, 2^31)",
        True,
    ),
    ({**OK, "prompt_tokens": 3}, "prompt_tokens", "3 but prompt_token_ids has 2", False),
    (
        {**OK, "output_token_ids": [5], "output_tokens": 2},
        "output_tokens",
        "2 but output_token_ids has 1",
        False,
    ),
    ({**OK, "output_tokens": -1}, "output_tokens", "-1 is outside [0, 2^31)", True),
    (
        {**OK, "timestamp": "yesterday"},
        "timestamp",
        "'yesterday' is not an RFC 3339 date-time",
        False,
    ),
    (
        {**OK, "timestamp": "2026-11-29T10:00:00"},
        "timestamp",
        "'2026-11-29T10:00:00' has no UTC offset (RFC 3339 needs one)",
        False,
    ),
    ({**OK, "timestamp": [1]}, "timestamp", "expected a number, got array", True),
    (
        {**OK, "timestamp": 1e300},  # issue 13, item 9: it overflowed the report's windows
        "timestamp",
        "1e+300 s is outside years 0000-9999 (-62,167,219,200 to 253,402,300,799 s, what "
        "RFC 3339 can write)",
        True,
    ),
    (
        {**OK, "timestamp": -62167219201},
        "timestamp",
        "-6.21672e+10 s is outside years 0000-9999 (-62,167,219,200 to 253,402,300,799 s, "
        "what RFC 3339 can write)",
        True,
    ),
    ({**OK, "ttft_ms": -3}, "ttft_ms", "-3 is negative", True),
    ({**OK, "cached_tokens": -1}, "cached_tokens", "-1 is outside [0, 2^31)", True),
    ({**OK, "cached_tokens": 1.5}, "cached_tokens", "expected an integer, got number", True),
    ({**OK, "cached_tokens": 3}, "cached_tokens", "3 is more than prompt_tokens (2)", False),
    (
        {"request_id": "h", "block_hash_ids": [1, 2], "block_size": 16, "cached_tokens": 33},
        "cached_tokens",
        "33 is more than prompt_tokens (32)",
        False,
    ),
    ({**OK, "replica": 1.5}, "replica", "expected a string, got number", True),
    (
        {**OK, "model_revision": {"name": "x"}},
        "model_revision",
        "expected a string, got object",
        True,
    ),
]


@pytest.mark.parametrize(("record", "field", "reason", "schema_knows"), BAD)
def test_rejects_with_field_and_reason(record, field, reason, schema_knows):
    with pytest.raises(RecordError) as info:
        validate_record(record, 1)
    assert (info.value.field, info.value.reason) == (field, reason)
    if schema_knows:
        assert not jsonschema.Draft202012Validator(SCHEMA).is_valid(record)


GOOD = [
    OK,
    {**OK, "timestamp": "2026-11-29T10:00:00+01:00", "replica": 2, "ttft_ms": 0},
    {**OK, "output_token_ids": [], "output_tokens": 0, "extra_field": [1, {"a": None}]},
    {"request_id": "h", "block_hash_ids": [-5, 2**63 - 1], "block_size": 512, "prompt_tokens": 513},
    {**OK, "model_revision": None, "prompt_family": None},
    {**OK, "cached_tokens": 2},
    {**OK, "cached_tokens": 0},
]


@pytest.mark.parametrize("record", GOOD)
def test_accepts_valid_records(record):
    row = validate_record(record, 3)
    assert row["line_no"] == 3 and row["request_id"] == record["request_id"]
    jsonschema.validate(record, SCHEMA, cls=jsonschema.Draft202012Validator)


def test_row_values():
    row = validate_record(
        {
            "request_id": "h",
            "block_hash_ids": [1, 2],
            "block_size": 16,
            "timestamp": "1970-01-01T00:01:00Z",
            "zeta": 1,
            "alpha": None,
        },
        9,
    )
    assert row["prompt_tokens"] == 32 and row["timestamp_s"] == 60.0
    assert row["extra"] == '{"zeta":1}'  # null-valued fields count as absent
    assert row["prompt_family_source"] is None


def test_schema_examples_are_valid():
    validator = jsonschema.Draft202012Validator(SCHEMA)
    validator.check_schema(SCHEMA)
    for example in SCHEMA["examples"]:
        validator.validate(example)
        validate_record(example, 1)


def test_cached_tokens_is_a_column_not_extra():
    row = validate_record({**OK, "cached_tokens": 1}, 1)
    assert row["cached_tokens"] == 1 and row["extra"] is None
    assert validate_record(OK, 1)["cached_tokens"] is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2024-01-01T00:00:00Z", 1704067200.0),
        ("2024-01-01t00:00:00z", 1704067200.0),  # RFC 3339 5.6: "T" and "Z" may be lower case
        ("2016-12-31T23:59:60Z", 1483228800.0),  # a leap second: the second after 23:59:59
        ("2024-02-29T12:00:00.5+05:30", 1709188200.5),
        ("2024-01-01T00:00:00-00:30", 1704069000.0),
        ("0000-01-01T00:00:00Z", -62167219200.0),  # RFC 3339's first year, before Python's
        ("0000-02-29T00:00:00Z", -62162121600.0),  # year 0 is a leap year
        ("9999-12-31T23:59:59Z", 253402300799.0),
        (-62167219200, -62167219200.0),  # numbers: seconds within the same years
        (253402300799, 253402300799.0),
    ],
)
def test_rfc3339_date_times_are_read_exactly(text, seconds):
    assert parse_timestamp(text) == seconds


@pytest.mark.parametrize(
    "text",
    [
        "2024-W01-1T00:00:00+00:00",  # ISO 8601 week date: not RFC 3339
        "2024-01-01 00:00:00Z",  # a space for "T"
        "2024-01-01T00:00Z",  # no seconds
        "2024-01-01T00:00:00+0530",  # an offset without its colon
        "2024-13-01T00:00:00Z",
        "2023-02-29T00:00:00Z",
        "2024-01-01T24:00:00Z",
        "2024-01-01T00:00:60Z",  # 60 seconds only end a minute
        "2024-01-01T00:00:00+24:00",
        "\uff12\uff10\uff12\uff14-01-01T00:00:00Z",  # full-width digits
    ],
)
def test_what_rfc3339_does_not_allow_is_rejected(text):
    with pytest.raises(RecordError, match="is not an RFC 3339 date-time"):
        parse_timestamp(text)


# Id lists are checked at C speed (types counted, min and max), and one by one only to name
# the first bad id: the verdict and the reason are those of the loop over every id.
_ID_LISTS = {  # field: (lowest, past the highest, as the reason writes it)
    "prompt_token_ids": (0, 2**31, "2^31"),
    "output_token_ids": (0, 2**31, "2^31"),
    "block_hash_ids": (INT64_MIN, INT64_MAX + 1, "2^63"),
}
_ids = (
    st.integers(-2, 2**31 + 1)
    | st.integers(INT64_MIN - 2, INT64_MAX + 2)
    | st.sampled_from([True, False, 1.0, 2.5, "3", None, [1], {"a": 1}])
)


def _one_by_one(name: str, values: list) -> tuple[str, str] | None:
    lo, hi, bound = _ID_LISTS[name]
    for i, v in enumerate(values):
        if type(v) is not int:
            return f"{name}[{i}]", f"expected an integer, got {type_name(v)}"
        if not lo <= v < hi:
            return f"{name}[{i}]", f"{v} is outside [{lo}, {bound})"
    return None


@given(st.sampled_from(sorted(_ID_LISTS)), st.lists(_ids, min_size=1, max_size=12))
def test_id_lists_are_checked_as_one_by_one(name, values):
    others = {"block_hash_ids": {"block_size": 16}, "output_token_ids": {"prompt_token_ids": [1]}}
    record = {"request_id": "r", name: values, **others.get(name, {})}
    try:
        row = validate_record(record, 1)
    except RecordError as err:
        assert (err.field, err.reason) == _one_by_one(name, values)
    else:
        assert _one_by_one(name, values) is None and row[name] == values


def test_int64_ids_are_taken_as_their_maker_checked_them():
    ids = Int64Ids([INT64_MIN, 5, INT64_MAX])
    plain = {"request_id": "r", "block_hash_ids": list(ids), "block_size": 4}
    made = exact_batch([(1, {**plain, "block_hash_ids": ids}, b"")])
    assert made.rows.equals(exact_batch([(1, plain, b"")]).rows) and not made.rejects
    for record, field, reason in (  # only as int64 block ids, and never when empty
        ({"prompt_token_ids": Int64Ids([1, 2**40])}, "prompt_token_ids[1]", "1099511627776 "),
        ({"block_hash_ids": Int64Ids(), "block_size": 4}, "block_hash_ids", "empty array"),
    ):
        with pytest.raises(RecordError) as info:
            validate_record({"request_id": "r", **record}, 1)
        assert info.value.field == field and info.value.reason.startswith(reason)
