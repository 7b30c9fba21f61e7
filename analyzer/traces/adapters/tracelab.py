"""TraceLab agentic-coding rounds (uw-syfi/TraceLab, `round_trace.jsonl`, CC BY 4.0 data).

One JSON object per line, one LLM round each: `session_id`, `round_index`, `model`,
`input_tokens_total`, `prefix_tokens` (the prompt tokens the provider reported as served
from its prefix cache), `newly_append_tokens` (= input_tokens_total - prefix_tokens),
`output_tokens`, `timing_events` (ISO 8601 times), `tools` and per-provider counters.
There are no token ids, so prompts become synthetic block hash ids.

Block ids (the rule, per session, rows in file order): with B = 16 tokens per block, T =
input_tokens_total and P = prefix_tokens, a round's prompt is ceil(T / B) blocks. Its first
min(P // B, T_prev // B, T // B) block ids are copied from the session's previous round
(whole blocks only, never the previous partial tail), and every other block gets a fresh
id that no other round or session has. So round k shares exactly the whole blocks of its
reported cached prefix with round k - 1 (AIPerf's TraceLab loader does the same, at 64
tokens and with the partial tail left out). A session's first round shares nothing.
Sharing across sessions (a provider-cached system prompt, which is why a first round can
report a large prefix_tokens) is unknown and not reproduced: nothing is shared across
sessions. B = 16 divides every model preset's block size (528, 544, 672, 784) and vLLM's
default, so any policy can replay these ids; a coarser B could not.

Fresh ids are (36-bit hash of session_id) << 27 | per-session counter: distinct within a
session, equal across files for the same session, and unlikely (about n^2 / 2^37 for n
sessions) to collide between sessions.

Canonical record: request_id = trace_key (else "<session_id>:<round_index>"),
conversation_id = session_id, parent_request_id = the session's previous round,
model_revision = model, timestamp = the first timing event's, block_hash_ids +
block_size 16 + prompt_tokens = T (a partial last block counts only its remainder),
cached_tokens = P, output_tokens. Other scalar fields are kept in `extra`;
`timing_events` and `tools` (large, per-event detail) are not stored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson
import pyarrow as pa

from analyzer.traces.adapters import Adapter
from analyzer.traces.batches import Batch, Reject, SourceInfo, exact_batch, excerpt, fast_rows
from analyzer.traces.jsonlines import json_line_chunks
from analyzer.traces.records import (
    KNOWN_FIELDS,
    ROW_SCHEMA,
    TOKEN_ID_LIMIT,
    RecordError,
    type_name,
)

NAME = "tracelab"
BLOCK_SIZE = 16
SOURCE = SourceInfo(
    BLOCK_SIZE,
    "TraceLab agentic-coding rounds (uw-syfi/TraceLab), https://github.com/uw-syfi/TraceLab, "
    "data CC BY 4.0; block ids synthesised per session from prefix_tokens (16-token blocks)",
)
_REQUIRED = ("session_id", "input_tokens_total", "prefix_tokens")
_DETECT = (*_REQUIRED, "newly_append_tokens")
_CONSUMED = frozenset(
    ("session_id", "input_tokens_total", "prefix_tokens", "output_tokens", "model", "trace_key")
)
_DROPPED = frozenset(("timing_events", "tools"))
_COUNTER_BITS = 27
_MAX_IDS_PER_BATCH = 4 << 20  # bounds a batch's id arrays (~32 MiB) on long sessions


def looks_like(first: Any) -> bool:
    """True when a file's first record is unambiguously a TraceLab round."""
    return (
        isinstance(first, dict)
        and all(k in first for k in _DETECT)
        and not any(k in first for k in ("request_id", "prompt_token_ids", "block_hash_ids"))
    )


@dataclass
class _Session:
    """The chain state of one session: its previous round's ids, length and request id."""

    key: int
    ids: np.ndarray
    prompt_tokens: int = 0
    request_id: str | None = None
    minted: int = 0


def read_tracelab(path: Path, stream: BinaryIO, progress: Callable[[], None]) -> Iterator[Batch]:
    """Batches of canonical rows from a TraceLab JSON Lines stream."""
    sessions: dict[str, _Session] = {}
    for items in json_line_chunks(path, stream, progress):
        rounds: list[tuple[int, dict[str, Any], np.ndarray, bytes]] = []
        rejects: list[Reject] = []
        for line_no, obj, raw in items:
            result = _round(obj, sessions)
            if isinstance(result, RecordError):
                rejects.append(Reject(line_no, result.field, result.reason, excerpt(raw)))
            else:
                rounds.append((line_no, *result, raw))
        yield from _batches(rounds, rejects)


def _round(obj: Any, sessions: dict[str, _Session]) -> tuple[dict, np.ndarray] | RecordError:
    """(canonical record without ids, block ids) of one round, advancing its session."""
    if isinstance(obj, RecordError):
        return obj
    if not isinstance(obj, dict):
        return RecordError(None, f"expected a JSON object, got {type_name(obj)}")
    rec = {k: v for k, v in obj.items() if v is not None}
    try:
        out = _fields(rec)
    except RecordError as err:
        return err
    sid, total, cached = rec["session_id"], out["prompt_tokens"], out["cached_tokens"]
    session = sessions.get(sid)
    if session is None:
        digest = hashlib.blake2b(sid.encode(), digest_size=8).digest()
        key = (int.from_bytes(digest, "big") >> 28) << _COUNTER_BITS
        session = sessions[sid] = _Session(key, np.empty(0, np.int64))
    reuse = min(cached // BLOCK_SIZE, session.prompt_tokens // BLOCK_SIZE, total // BLOCK_SIZE)
    fresh = -(-total // BLOCK_SIZE) - reuse
    if session.minted + fresh >= 1 << _COUNTER_BITS:
        return RecordError("session_id", f"session {sid!r} needs more than 2^27 fresh blocks")
    new = session.key | np.arange(session.minted, session.minted + fresh, dtype=np.int64)
    ids = np.concatenate((session.ids[:reuse], new))
    if session.request_id is not None:
        out["parent_request_id"] = session.request_id
    session.ids, session.prompt_tokens = ids, total
    session.request_id, session.minted = out["request_id"], session.minted + fresh
    return out, ids


def _fields(rec: dict[str, Any]) -> dict[str, Any]:
    """The canonical fields of one round (block ids aside); raises RecordError."""
    for name in _REQUIRED:
        if name not in rec:
            raise RecordError(name, "missing (required in a TraceLab round)")
    sid = rec["session_id"]
    if not isinstance(sid, str) or not sid:
        raise RecordError("session_id", f"expected a non-empty string, got {type_name(sid)}")
    total = _count(rec, "input_tokens_total", 1)
    cached = _count(rec, "prefix_tokens", 0)
    if cached > total:
        raise RecordError("prefix_tokens", f"{cached} is more than input_tokens_total ({total})")
    if "newly_append_tokens" in rec and _count(rec, "newly_append_tokens", 0) != total - cached:
        raise RecordError(
            "newly_append_tokens",
            f"{rec['newly_append_tokens']} but input_tokens_total - prefix_tokens = "
            f"{total - cached}",
        )
    out: dict[str, Any] = {
        k: v
        for k, v in rec.items()
        if k not in _CONSUMED and k not in _DROPPED and k not in KNOWN_FIELDS
    }
    out["request_id"] = _request_id(rec)
    out["conversation_id"] = sid
    out["block_size"] = BLOCK_SIZE
    out["prompt_tokens"], out["cached_tokens"] = total, cached
    if "output_tokens" in rec:
        out["output_tokens"] = _count(rec, "output_tokens", 0)
    if "model" in rec:
        if not isinstance(rec["model"], str):
            raise RecordError("model", f"expected a string, got {type_name(rec['model'])}")
        out["model_revision"] = rec["model"]
    timestamp = _first_event_time(rec.get("timing_events"))
    if timestamp is not None:
        out["timestamp"] = timestamp
    return out


def _count(rec: dict[str, Any], name: str, minimum: int) -> int:
    value = rec[name]
    if type(value) is not int:
        raise RecordError(name, f"expected an integer, got {type_name(value)}")
    if not minimum <= value < TOKEN_ID_LIMIT:
        raise RecordError(name, f"{value} is outside [{minimum}, 2^31)")
    return value


def _request_id(rec: dict[str, Any]) -> str:
    key = rec.get("trace_key")
    if isinstance(key, str) and key:
        return key
    if "round_index" not in rec:
        raise RecordError("round_index", "missing (needed as the request id without trace_key)")
    return f"{rec['session_id']}:{rec['round_index']}"


def _first_event_time(events: Any) -> float | None:
    """Seconds of the first timing event that has a timestamp (ISO 8601, UTC if no zone)."""
    if events is None:
        return None
    if not isinstance(events, list):
        raise RecordError("timing_events", f"expected an array, got {type_name(events)}")
    for i, event in enumerate(events):
        stamp = event.get("timestamp") if isinstance(event, dict) else None
        if stamp is None:
            continue
        field = f"timing_events[{i}].timestamp"
        if not isinstance(stamp, str):
            raise RecordError(field, f"expected an ISO 8601 string, got {type_name(stamp)}")
        try:
            moment = datetime.fromisoformat(stamp)
        except ValueError:
            raise RecordError(field, f"{stamp!r} is not an ISO 8601 date-time") from None
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    return None


def _batches(rounds: list, rejects: list[Reject]) -> Iterator[Batch]:
    """The rounds in batches of bounded id count; the rejects ride with the first."""
    start, count = 0, 0
    for i, (_, _, ids, _) in enumerate(rounds):
        if count and count + len(ids) > _MAX_IDS_PER_BATCH:
            yield _batch(rounds[start:i], rejects)
            start, count, rejects = i, 0, []
        count += len(ids)
    if rounds[start:] or rejects:
        yield _batch(rounds[start:], rejects)


_TABLE_FIELDS = (
    "request_id",
    "conversation_id",
    "parent_request_id",
    "model_revision",
    "timestamp",
    "block_size",
    "prompt_tokens",
    "cached_tokens",
    "output_tokens",
)


def _batch(rounds: list, rejects: list[Reject]) -> Batch:
    """Stored rows of valid rounds through the vectorised path (ids stay in NumPy)."""
    if not rounds:
        return Batch(ROW_SCHEMA.empty_table(), rejects)
    columns = {name: [rec.get(name) for _, rec, _, _ in rounds] for name in _TABLE_FIELDS}
    arrays = [ids for _, _, ids, _ in rounds]
    offsets = np.zeros(len(arrays) + 1, np.int32)
    np.cumsum([len(a) for a in arrays], out=offsets[1:])
    columns["block_hash_ids"] = pa.ListArray.from_arrays(offsets, np.concatenate(arrays))
    line_nos = pa.array([line for line, _, _, _ in rounds], pa.int64())
    rows = fast_rows(pa.table(columns), line_nos)
    if rows is None:  # cannot happen for rounds `_fields` accepted; the exact path says why
        items = [(n, {**rec, "block_hash_ids": ids.tolist()}, raw) for n, rec, ids, raw in rounds]
        checked = exact_batch(items)
        return Batch(checked.rows, sorted(rejects + checked.rejects, key=lambda r: r.line_no))
    extra = [_extra_json(rec) for _, rec, _, _ in rounds]
    rows = rows.set_column(
        rows.schema.get_field_index("extra"), "extra", pa.array(extra, pa.string())
    )
    return Batch(rows, rejects)


def _extra_json(rec: dict[str, Any]) -> str | None:
    """The `extra` column exactly as `records.validate_record` writes it."""
    extra = {k: v for k, v in rec.items() if k not in KNOWN_FIELDS}
    return orjson.dumps(extra, option=orjson.OPT_SORT_KEYS).decode() if extra else None


ADAPTER = Adapter(NAME, read_tracelab, SOURCE, record=lambda first, head: looks_like(first))
