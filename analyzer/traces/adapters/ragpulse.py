"""RAGPulse traces (flashserve/RAGPulse `data/`): a university RAG Q&A service, one week.

`0_trace.jsonl`, one request per line: ``{"timestamp": "82", "input_length": 3112,
"output_length": 192, "hash_ids": {"sys_prompt": [8302, 14332, 15199], "passages_ids": [...],
"history": [15200], "web_search": [], "user_input": [26923]}, "session_id": "..."}``. The ids
are chunk identities (not prefix-chained) of variable length, at most 512 tokens; side tables
beside the trace give each id's `token_length`: `1_sys_prompt.jsonl` (`sys_prompt_id`),
`2_passages.jsonl` (`passage_id`), `3_history.jsonl`, `4_user_input.jsonl`,
`5_web_search.jsonl`.

Canonical record: the prompt is the components concatenated in the order the authors'
replay uses (system prompt, passages, history, web search, user input) as synthetic token
ids. Token k of chunk c of component i is ``i * 2^28 + c * 2^10 + k``: equal chunks give equal
tokens, different chunks differ from their first token on, so shared prefixes are exactly
those of the chunk lists. The tables sum to 6-12 tokens less than `input_length` in every
record (chat-template tokens, most likely); that residual becomes request-unique tokens at
the end (ids from ``5 * 2^28`` up, hashed from the request id), so prompt_tokens =
input_length and the shared prefix is never overstated. request_id = "<file stem>:<line>",
timestamp = the string of seconds as a number (plus one week per clock restart, see
`_Links`), output_tokens = output_length, conversation_id = session_id, parent_request_id =
the session's previous request in the file; extra.component_tokens has each component's
length and the residual. The token ids carry no fixed block size: replay picks its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from analyzer.errors import InputFileError
from analyzer.traces.adapters import Adapter
from analyzer.traces.batches import Batch, SourceInfo, exact_batch
from analyzer.traces.io import CountingReader, open_binary
from analyzer.traces.jsonlines import LongLine, json_line_chunks, whole_lines
from analyzer.traces.records import TOKEN_ID_LIMIT, RecordError, type_name

NAME = "ragpulse"
SOURCE = SourceInfo(
    None,  # token ids synthesised from variable-length chunks: no fixed block size
    "RAGPulse (flashserve, university RAG Q&A, one week), "
    "https://github.com/flashserve/RAGPulse/tree/main/data, MIT",
    "each week sample after a clock restart is moved one week later (the trace's own value "
    "is extra.trace_timestamp)",
)
# (component key in hash_ids, side table stem, id field), in prompt order.
COMPONENTS = (
    ("sys_prompt", "1_sys_prompt", "sys_prompt_id"),
    ("passages_ids", "2_passages", "passage_id"),
    ("history", "3_history", "history_id"),
    ("web_search", "5_web_search", "web_search_id"),
    ("user_input", "4_user_input", "user_input_id"),
)
SIDE_TABLES = frozenset(stem for _, stem, _ in COMPONENTS)
TRACE_STEM = "0_trace"  # the request file, read with the side tables beside it


def side_table(path: Path) -> str | None:
    """Why `path` is a RAGPulse side table next to its trace, which reads it; else None."""
    stem = path.name.split(".", 1)[0]
    if stem in SIDE_TABLES and any(path.parent.glob(f"{TRACE_STEM}.jsonl*")):
        return f"a RAGPulse side table: {TRACE_STEM}.jsonl reads it"
    return None


CHUNK_BITS, POSITION_BITS = 18, 10  # chunk ids < 2^18, chunks of at most 2^10 tokens
COMPONENT_SPAN = 1 << (CHUNK_BITS + POSITION_BITS)
RESIDUAL_BASE = len(COMPONENTS) * COMPONENT_SPAN  # residual tokens: [RESIDUAL_BASE, 2^31)
_OWN_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids", "session_id")
SEGMENT_GAP_S = 86_400.0  # a step back in time larger than this starts a new segment...
SEGMENT_PERIOD_S = 604_800.0  # ...which is the next week of the trace

Lengths = tuple[dict[int, int], ...]  # per component: chunk id -> token length


def looks_like(first: Any) -> bool:
    """True when a file's first record is unambiguously a RAGPulse request."""
    return (
        isinstance(first, dict)
        and isinstance(first.get("hash_ids"), dict)
        and "input_length" in first
        and any(key in first["hash_ids"] for key, _, _ in COMPONENTS)
    )


def read_ragpulse(path: Path, stream: BinaryIO, progress: Callable[[], None]) -> Iterator[Batch]:
    """Batches of canonical rows; the length tables are read from the trace's directory."""
    lengths = load_lengths(path.parent)
    stem = path.name.split(".")[0]
    links = _Links()
    for items in json_line_chunks(path, stream, progress):
        yield exact_batch(
            [(n, links.add(_canonical(obj, f"{stem}:{n}", lengths)), raw) for n, obj, raw in items]
        )


class _Links:
    """State across the records of a file: each session's last request, and the week segment.

    The published 0_trace.jsonl is two one-week samples one after the other (lines 1-3,800
    and 3,801-7,106; their session ids start with millisecond epochs 7 days apart), each
    timed from its own start. A timestamp more than SEGMENT_GAP_S before the previous one
    starts a new segment, shifted by SEGMENT_PERIOD_S per segment, so the weeks follow each
    other instead of overlapping; the original value stays in extra.trace_timestamp.
    """

    def __init__(self) -> None:
        self.last_of_session: dict[str, str] = {}
        self.segment, self.previous_s = 0, None

    def add(self, rec: Any) -> Any:
        if not isinstance(rec, dict):
            return rec
        if "timestamp" in rec:
            seconds = rec["timestamp"]
            if self.previous_s is not None and seconds < self.previous_s - SEGMENT_GAP_S:
                self.segment += 1
            self.previous_s = seconds
            rec["timestamp"] = seconds + self.segment * SEGMENT_PERIOD_S
        session = rec.get("conversation_id")
        if isinstance(session, str):
            rec["parent_request_id"] = self.last_of_session.get(session)
            self.last_of_session[session] = rec["request_id"]
        return rec


def load_lengths(directory: Path) -> Lengths:
    """Each component's chunk id -> token length, from the side tables in `directory`."""
    return tuple(_load_table(directory, stem, field) for _, stem, field in COMPONENTS)


def _load_table(directory: Path, stem: str, field: str) -> dict[int, int]:

    candidates = [directory / f"{stem}.jsonl{s}" for s in ("", ".gz", ".zst")]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise InputFileError(f"{candidates[0]}: no such file (RAGPulse length table)")
    table: dict[int, int] = {}
    with open(path, "rb") as raw, open_binary(path, CountingReader(raw)) as stream:
        for line_no, line in _numbered(path, stream):
            if line.strip():
                chunk, length = _table_row(path, line_no, line, field)
                if table.setdefault(chunk, length) != length:
                    raise InputFileError(f"{path}:{line_no}: {field} {chunk} given twice")
    return table


def _numbered(path: Path, stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a side table; a line longer than the limit is a file error
    (`jsonlines.whole_lines` reads past it, memory bounded)."""
    for piece in whole_lines(stream, lambda: None):
        if isinstance(piece, LongLine):
            why = piece.error().reason
            raise InputFileError(f"{path}:{piece.line_no}: not a length-table row ({why})")
        body, first = piece
        for offset, line in enumerate(body.split(b"\n")[:-1]):
            yield first + offset, line


def _table_row(path: Path, line_no: int, line: bytes, field: str) -> tuple[int, int]:
    try:
        row = orjson.loads(line)
        chunk, length = row[field], row["token_length"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise InputFileError(
            f"{path}:{line_no}: not a length-table row ({field}, token_length)"
        ) from None
    if type(chunk) is not int or not 0 <= chunk < 1 << CHUNK_BITS:
        raise InputFileError(f"{path}:{line_no}: {field} {chunk!r} is not in [0, 2^18)")
    if type(length) is not int or not 0 < length <= 1 << POSITION_BITS:
        raise InputFileError(f"{path}:{line_no}: token_length {length!r} is not in [1, 1024]")
    return chunk, length


def _canonical(obj: Any, request_id: str, lengths: Lengths) -> Any:
    """The canonical record of one RAGPulse request (or a RecordError / the object as is)."""
    if not isinstance(obj, dict):
        return obj  # a RecordError, or a non-object the validator rejects with its reason
    rec = {k: v for k, v in obj.items() if v is not None}
    for name in ("hash_ids", "input_length"):
        if name not in rec:
            return RecordError(name, "missing (required in a RAGPulse record)")
    out: dict[str, Any] = {k: v for k, v in rec.items() if k not in _OWN_FIELDS}
    out["request_id"] = request_id
    try:
        if "timestamp" in rec:
            out["timestamp"] = _seconds(rec["timestamp"])
            out["trace_timestamp"] = rec["timestamp"]
        tokens, sizes = _prompt(rec["hash_ids"], rec["input_length"], request_id, lengths)
    except RecordError as err:
        return err
    out["prompt_token_ids"] = tokens
    out["component_tokens"] = sizes  # not a canonical field: kept in `extra`
    if "output_length" in rec:
        out["output_tokens"] = rec["output_length"]
    if "session_id" in rec:
        out["conversation_id"] = rec["session_id"]
    return out


def _seconds(value: Any) -> float:
    if type(value) in (int, float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise RecordError("timestamp", f"expected seconds (a number or numeric string), got {value!r}")


def _prompt(
    hash_ids: Any, input_length: Any, request_id: str, lengths: Lengths
) -> tuple[list[int], dict[str, int]]:
    """Synthetic prompt token ids, and the tokens of each component (plus the residual)."""
    if not isinstance(hash_ids, dict):
        raise RecordError(
            "hash_ids", f"expected an object of components, got {type_name(hash_ids)}"
        )
    if type(input_length) is not int or not 0 < input_length < TOKEN_ID_LIMIT:
        raise RecordError("input_length", f"expected a positive integer, got {input_length!r}")
    tokens: list[int] = []
    sizes: dict[str, int] = {}
    for i, (key, stem, _) in enumerate(COMPONENTS):
        chunks = hash_ids.get(key, [])
        if not isinstance(chunks, list):
            raise RecordError(f"hash_ids.{key}", f"expected an array, got {type_name(chunks)}")
        start = len(tokens)
        for j, chunk in enumerate(chunks):
            length = lengths[i].get(chunk) if type(chunk) is int else None
            if length is None:
                raise RecordError(f"hash_ids.{key}[{j}]", f"{chunk!r} is not in {stem}.jsonl")
            first = i * COMPONENT_SPAN + (chunk << POSITION_BITS)
            tokens.extend(range(first, first + length))
        sizes[key] = len(tokens) - start
    residual = input_length - len(tokens)
    if residual < 0:
        raise RecordError(
            "input_length", f"{input_length} but the components add up to {len(tokens)} tokens"
        )
    tokens.extend(_residual_tokens(request_id, residual))
    sizes["residual"] = residual
    return tokens, sizes


def _residual_tokens(request_id: str, count: int) -> list[int]:
    """`count` token ids in [RESIDUAL_BASE, 2^31) drawn from the request id: no chunk token
    ever equals them, and another request's only by a 1 in 8 x 10^8 chance per token."""
    span = TOKEN_ID_LIMIT - RESIDUAL_BASE
    return [
        RESIDUAL_BASE
        + int.from_bytes(hashlib.blake2b(f"{request_id}#{k}".encode(), digest_size=8).digest())
        % span
        for k in range(count)
    ]


ADAPTER = Adapter(
    NAME, read_ragpulse, SOURCE, record=lambda first, head: looks_like(first), side_table=side_table
)
