"""The canonical request record (docs/definitions.md#the-request-record): field types, and
validation of one record.

This is the exact, per-record path and the single source of truth for what a valid
record is and for every reject reason. The vectorised path in `batches.py` accepts a
batch only when it can prove every row would pass here; otherwise it defers to this.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
import pyarrow as pa

TOKEN_ID_LIMIT = 2**31
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

STRING_FIELDS = (
    "request_id",
    "model_revision",
    "prompt_family",
    "conversation_id",
    "parent_request_id",
    "cache_salt",
    "lora_name",
    "spec_decode",
    "tenant",
)
TOKEN_LIST_FIELDS = ("prompt_token_ids", "output_token_ids")
MISSING_IDS = "missing (give prompt_token_ids, or block_hash_ids with block_size)"
# Why a trace of no ids and no hashes (token counts, text) is refused, and what to bring.
NO_IDS_WHY = (
    "prefix analysis needs what each prompt holds, token by token (prompt_token_ids) or block "
    "by block (block_hash_ids with block_size): counts cannot tell whether two prompts share "
    "a prefix; bring the token ids or block hashes, or the prompts' text as a chat or "
    "completion log with --tokenizer (docs/traces.md#from-your-logs-to-a-trace)"
)
COUNT_FIELDS = ("block_size", "prompt_tokens", "output_tokens", "cached_tokens")
KNOWN_FIELDS = frozenset(
    STRING_FIELDS
    + TOKEN_LIST_FIELDS
    + COUNT_FIELDS
    + ("replica", "timestamp", "block_hash_ids", "ttft_ms")
)

# Column order and types of a stored row (the `requests` table minus store-owned columns).
ROW_SCHEMA = pa.schema(
    [
        ("request_id", pa.string()),
        ("line_no", pa.int64()),
        ("timestamp_s", pa.float64()),
        ("prompt_tokens", pa.int32()),
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("block_hash_ids", pa.list_(pa.int64())),
        ("block_size", pa.int32()),
        ("output_tokens", pa.int32()),
        ("output_token_ids", pa.list_(pa.int32())),
        ("model_revision", pa.string()),
        ("prompt_family", pa.string()),
        ("prompt_family_source", pa.string()),
        ("replica", pa.string()),
        ("conversation_id", pa.string()),
        ("parent_request_id", pa.string()),
        ("cache_salt", pa.string()),
        ("lora_name", pa.string()),
        ("spec_decode", pa.string()),
        ("tenant", pa.string()),
        ("ttft_ms", pa.float64()),
        ("extra", pa.string()),
        ("cached_tokens", pa.int32()),
    ]
)


class RecordError(ValueError):
    """One invalid field of one record: `field` is a JSON path, `reason` says why."""

    def __init__(self, field: str | None, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field, self.reason = field, reason


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
    }.get(type(value), type(value).__name__)


class Int64Ids(list):
    """A list of ids its maker proved ints (no bool) in [INT64_MIN, INT64_MAX] as it built it
    (`hashchain.chained`): `validate_record` takes it as block_hash_ids without checking each
    id again (the WEKA trace's 94 M ids). Whoever adds to one adds such ints only."""

    __slots__ = ()


def _ints_within(values: list, lo: int, hi: int) -> bool:
    """Whether every element of `values` is an int (a bool is not) in [lo, hi): the verdict
    of a loop over `type(v) is int and lo <= v < hi`, taken at C speed (types counted, then
    min and max: 40 ns an id, where the loop took 60)."""
    if list(map(type, values)).count(int) != len(values):
        return False
    return not values or (lo <= min(values) and max(values) < hi)


def _int_list(name: str, value: Any, lo: int, hi: int) -> list[int]:
    if not isinstance(value, list):
        raise RecordError(name, f"expected an array of integers, got {type_name(value)}")
    if not value:
        raise RecordError(name, "empty array (a request needs at least one token)")
    if type(value) is Int64Ids and lo <= INT64_MIN and INT64_MAX < hi:
        return value
    if _ints_within(value, lo, hi):
        return value
    for i, v in enumerate(value):  # the first id that fails, for its reason
        if type(v) is not int:
            raise RecordError(f"{name}[{i}]", f"expected an integer, got {type_name(v)}")
        if not lo <= v < hi:
            raise RecordError(f"{name}[{i}]", f"{v} is outside [{lo}, {_bound(hi)})")
    return value


def _bound(hi: int) -> str:
    return {TOKEN_ID_LIMIT: "2^31", INT64_MAX + 1: "2^63"}.get(hi, str(hi))


def _count(name: str, value: Any, minimum: int) -> int:
    if type(value) is not int:
        raise RecordError(name, f"expected an integer, got {type_name(value)}")
    if not minimum <= value < TOKEN_ID_LIMIT:
        raise RecordError(name, f"{value} is outside [{minimum}, 2^31)")
    return value


def not_finite(name: str | None, text: str) -> RecordError:
    """The error of a number written `text` that is no finite float: NaN or Infinity (no JSON
    number, RFC 8259), or digits past the largest float (1e400), which a float reads as
    infinite."""
    if any(c.isdigit() for c in text):
        return RecordError(name, f"{text} is outside the range of a float (-1.8e308 to 1.8e308)")
    return RecordError(name, f"{text} is not a finite number")


def _number(name: str, value: Any) -> float:
    if type(value) not in (int, float):
        raise RecordError(name, f"expected a number, got {type_name(value)}")
    if not math.isfinite(value):
        raise RecordError(name, f"{value} is not a finite number")
    return float(value)


# RFC 3339 section 5.6 `date-time`, exactly: full-date "T" full-time, with seconds and a
# "Z" or +-HH:MM offset; "T" and "Z" may be lower case (5.6, NOTE); a space is not allowed.
_DATE_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))?",
    re.ASCII,
)


# The seconds RFC 3339 can write (years 0000-9999, UTC): a number outside is no time (a
# timestamp of 1e300 s overflowed every window and clock computed from it).
TIMESTAMP_MIN_S, TIMESTAMP_MAX_S = -62_167_219_200.0, 253_402_300_799.0
_CYCLE_S = 146_097 * 86_400.0  # 400 Gregorian years


def first_bad_utf8(data: bytes) -> str | None:
    """Where `data` stops being UTF-8 ("byte 0xff at byte 3", 1-based), None when it is."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"byte 0x{data[bad.start]:02x} at byte {bad.start + 1}"
    return None


def parse_timestamp(value: Any) -> float:
    """Seconds from a number (seconds, within years 0000-9999) or an RFC 3339 date-time (a
    UTC offset required; a leap second, 23:59:60, is the second after 23:59:59)."""
    if isinstance(value, str):
        return _rfc3339(value)
    return _in_range(_number("timestamp", value))


def _in_range(seconds: float) -> float:
    if not TIMESTAMP_MIN_S <= seconds <= TIMESTAMP_MAX_S:
        raise RecordError(
            "timestamp",
            f"{seconds:g} s is outside years 0000-9999 ({TIMESTAMP_MIN_S:,.0f} to "
            f"{TIMESTAMP_MAX_S:,.0f} s, what RFC 3339 can write)",
        )
    return seconds


def _rfc3339(text: str) -> float:
    found = _DATE_TIME.fullmatch(text)
    if found is None:
        raise RecordError("timestamp", f"{text!r} is not an RFC 3339 date-time")
    year, month, day, hour, minute, second = (int(g) for g in found.groups()[:6])
    fraction, zulu, sign, off_hour, off_minute = found.groups()[6:]
    if zulu is None and sign is None:
        raise RecordError("timestamp", f"{text!r} has no UTC offset (RFC 3339 needs one)")
    leap = second == 60 and minute == 59  # RFC 3339 5.7: a leap second ends a minute
    try:
        if (sign and (int(off_hour) > 23 or int(off_minute) > 59)) or hour > 23:
            raise ValueError
        offset = 0 if sign is None else (int(off_hour) * 60 + int(off_minute)) * 60
        zone = timezone(timedelta(seconds=-offset if sign == "-" else offset))
        # Python's dates start at year 1; RFC 3339's at 0000, a leap year 400 years (146,097
        # days, one Gregorian cycle) before 0400.
        shift = _CYCLE_S if year == 0 else 0.0
        moment = datetime(
            year + (400 if year == 0 else 0),
            month,
            day,
            hour,
            minute,
            59 if leap else second,
            tzinfo=zone,
        )
    except ValueError:
        raise RecordError("timestamp", f"{text!r} is not an RFC 3339 date-time") from None
    return moment.timestamp() - shift + leap + (float(fraction) if fraction else 0.0)


def parse_time_text(text: str) -> float:
    """Seconds from a command-line time: a number of seconds or an RFC 3339 date-time.

    Raises RecordError (its `reason` says why) for anything else or a non-finite number."""
    try:
        value = float(text)
    except ValueError:
        return parse_timestamp(text)
    if not math.isfinite(value):
        raise RecordError("timestamp", f"{text!r} is not finite")
    return _in_range(value)


def _string(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise RecordError(name, f"expected a string, got {type_name(value)}")
    return value


def validate_record(obj: Any, line_no: int) -> dict[str, Any]:
    """A stored row (keys of ROW_SCHEMA) from one decoded record; raises RecordError."""
    if not isinstance(obj, dict):
        raise RecordError(None, f"expected a JSON object, got {type_name(obj)}")
    rec = {k: v for k, v in obj.items() if v is not None}
    if "request_id" not in rec:
        raise RecordError("request_id", "missing (required)")
    row: dict[str, Any] = {name: None for name in ROW_SCHEMA.names}
    row["line_no"] = line_no
    for name in STRING_FIELDS:
        if name in rec:
            row[name] = _string(name, rec[name])
    if row["request_id"] == "":
        raise RecordError("request_id", "empty string")
    if "replica" in rec:
        replica = rec["replica"]
        if type(replica) is int:
            replica = str(replica)  # documented: integer replicas are stored as text
        row["replica"] = _string("replica", replica)
    if row["prompt_family"] is not None:
        row["prompt_family_source"] = "trace"
    if "timestamp" in rec:
        row["timestamp_s"] = parse_timestamp(rec["timestamp"])
    if "ttft_ms" in rec:
        row["ttft_ms"] = _number("ttft_ms", rec["ttft_ms"])
        if row["ttft_ms"] < 0:
            raise RecordError("ttft_ms", f"{rec['ttft_ms']} is negative")
    _prompt(rec, row)
    _cached(rec, row)
    _output(rec, row)
    extra = {k: v for k, v in rec.items() if k not in KNOWN_FIELDS}
    if extra:
        row["extra"] = extra_json(extra)
    return row


def extra_json(extra: dict[str, Any]) -> str:
    """The unknown fields as compact JSON, keys sorted; integers past 64 bits exactly (orjson
    cannot write them, the standard library can)."""
    try:
        return orjson.dumps(extra, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return json.dumps(extra, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _prompt(rec: dict[str, Any], row: dict[str, Any]) -> None:
    has_ids, has_hashes = "prompt_token_ids" in rec, "block_hash_ids" in rec
    if has_ids and has_hashes:
        raise RecordError("block_hash_ids", "give prompt_token_ids or block_hash_ids, not both")
    if not has_ids and not has_hashes:
        raise RecordError("prompt_token_ids", MISSING_IDS)
    if "block_size" in rec:
        row["block_size"] = _count("block_size", rec["block_size"], 1)
    claimed = _count("prompt_tokens", rec["prompt_tokens"], 1) if "prompt_tokens" in rec else None
    if has_ids:
        row["prompt_token_ids"] = ids = _int_list(
            "prompt_token_ids", rec["prompt_token_ids"], 0, TOKEN_ID_LIMIT
        )
        if claimed is not None and claimed != len(ids):
            raise RecordError("prompt_tokens", f"{claimed} but prompt_token_ids has {len(ids)}")
        row["prompt_tokens"] = len(ids)
        return
    hashes = _int_list("block_hash_ids", rec["block_hash_ids"], INT64_MIN, INT64_MAX + 1)
    if row["block_size"] is None:
        raise RecordError("block_size", "missing (required with block_hash_ids)")
    size = row["block_size"]
    if claimed is not None and -(-claimed // size) != len(hashes):
        raise RecordError(
            "prompt_tokens",
            f"{claimed} tokens need {-(-claimed // size)} blocks of {size}, "
            f"block_hash_ids has {len(hashes)}",
        )
    row["block_hash_ids"] = hashes
    row["prompt_tokens"] = claimed if claimed is not None else len(hashes) * size
    if row["prompt_tokens"] >= TOKEN_ID_LIMIT:
        raise RecordError("block_hash_ids", "prompt longer than 2^31 tokens")


def _cached(rec: dict[str, Any], row: dict[str, Any]) -> None:
    """Engine-reported cached prompt tokens: 0 <= cached_tokens <= prompt_tokens."""
    if "cached_tokens" not in rec:
        return
    cached = _count("cached_tokens", rec["cached_tokens"], 0)
    if cached > row["prompt_tokens"]:
        raise RecordError(
            "cached_tokens", f"{cached} is more than prompt_tokens ({row['prompt_tokens']})"
        )
    row["cached_tokens"] = cached


def _output(rec: dict[str, Any], row: dict[str, Any]) -> None:
    if "output_tokens" in rec:
        row["output_tokens"] = _count("output_tokens", rec["output_tokens"], 0)
    if "output_token_ids" not in rec:
        return
    ids = rec["output_token_ids"]
    if isinstance(ids, list) and not ids:
        row["output_token_ids"] = []  # an empty output is a fact, not an error
    else:
        row["output_token_ids"] = _int_list("output_token_ids", ids, 0, TOKEN_ID_LIMIT)
    if row["output_tokens"] is None:
        row["output_tokens"] = len(row["output_token_ids"])
    elif row["output_tokens"] != len(row["output_token_ids"]):
        raise RecordError(
            "output_tokens",
            f"{row['output_tokens']} but output_token_ids has {len(row['output_token_ids'])}",
        )
