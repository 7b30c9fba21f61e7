"""WEKA Claude Code agentic traces (callanjfox/kv-cache-tester `traces/trace_NNNN.json`).

One JSON object per conversation (a file holds one, on one line; a JSON Lines file of
such objects is read the same way): ``{"id": "trace_0012", "block_size": 64,
"hash_id_scope": "local", "requests": [{"t": 0.0, "type": "n", "model": "...", "in": 15161,
"out": 291, "hash_ids": [1, 2, ...], ...}, {"t": 12.0, "type": "subagent", "agent_id": ...,
"requests": [...]}]}``. `t` is seconds from the conversation start; inside a sub-agent it is
seconds from the sub-agent's own start (its first request is always at 0.0, and the
sub-agent entry's `t` sits on the parent's clock).

Canonical record, per request (sub-agents flattened in place):
- request_id "<id>:<i>" (top level) or "<id>:<i>.<j>" (request j of the sub-agent at i);
  line_no is the request's 1-based position in the file's flattened order.
- block_hash_ids: the local ids are comparable only inside one file, so each becomes a
  global chained id hash(previous global id, local id), seeded with the sha256 of the
  conversation's bytes: equal ids still mean an equal prefix inside the file, and two
  files never share an id. `hash_ids` cover only the FULL 64-token blocks, so when `in` is
  not a multiple of 64 the partial tail block gets one extra id unique to the request
  (it never matches anything), keeping prompt_tokens = `in` and ceil(in / 64) = #ids.
- timestamp = conversation start + `t` (+ the sub-agent's `t` for nested requests). The
  start is the conversation's own absolute `start_time`/`timestamp` when it has one, else
  a deterministic offset in [0, START_WINDOW_S) drawn from sha256 of its `id`, so
  conversations interleave instead of all starting at 0.
- model_revision = `model`; output_tokens = `out`; ttft_ms = `ttft` (seconds) x 1000;
  conversation_id = `id` (sub-agents: "<id>/<agent_id>"); parent_request_id = the
  previous request of the same conversation (a sub-agent's first request: the parent
  request before it). Other fields are kept in `extra`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from analyzer.errors import InputFileError
from analyzer.traces.adapters import Adapter, hashchain
from analyzer.traces.batches import Batch, SourceInfo, exact_batch
from analyzer.traces.jsonlines import json_line_chunks
from analyzer.traces.records import RecordError, parse_timestamp, type_name

NAME = "weka"
BLOCK_SIZE = 64
START_WINDOW_S = 86_400.0  # conversation starts spread over one day (median length ~1 h)
SOURCE = SourceInfo(
    BLOCK_SIZE,
    "WEKA Claude Code agentic traces (kv-cache-tester), "
    "https://github.com/callanjfox/kv-cache-tester/tree/main/traces, Apache-2.0",
    "a conversation without an absolute start starts at a synthetic offset in one day, "
    "seeded by its id; only times inside a conversation are the trace's",
)
_OWN_FIELDS = ("t", "model", "in", "out", "hash_ids", "ttft", "timestamp")
_START_FIELDS = ("start_time", "timestamp")  # an absolute conversation start, if given
_HEAD_PATTERN = re.compile(rb'^\s*\{.{0,2000}?"hash_id_scope"\s*:', re.DOTALL)

Item = tuple[int, Any, str]


def looks_like(first: Any, head: bytes = b"") -> bool:
    """True when a file is unambiguously a WEKA conversation: its first object (or, when that
    line is longer than the bytes read, its first bytes) has `hash_id_scope` and `requests`."""
    if isinstance(first, dict):
        return "hash_id_scope" in first and isinstance(first.get("requests"), list)
    return first is None and bool(_HEAD_PATTERN.match(head[:4096])) and b'"requests"' in head


def read_weka(path: Path, stream: BinaryIO, progress: Callable[[], None]) -> Iterator[Batch]:
    """Batches of canonical rows, one batch per conversation object of the file."""
    ordinal = 0
    for items in json_line_chunks(path, stream, progress):
        for line_no, obj, raw in items:
            if not isinstance(obj, dict) or not isinstance(obj.get("requests"), list):
                why = obj.reason if isinstance(obj, RecordError) else "no `requests` array"
                raise InputFileError(f"{path}:{line_no}: not a WEKA conversation ({why})")
            conversation = _Conversation(obj, raw, path)
            flat = conversation.flatten(ordinal)
            ordinal += len(flat)
            yield exact_batch(flat)


class _Conversation:
    """One conversation object: its id namespace, start time, and chained global ids."""

    def __init__(self, obj: dict[str, Any], raw: bytes, path: Path) -> None:
        self.obj = obj
        self.key = obj["id"] if isinstance(obj.get("id"), str) else path.name.split(".")[0]
        self.seed = hashchain.seed(hashlib.sha256(raw).digest())
        self.start_s = _start_s(obj, self.key, path)
        self.memo: hashchain.Memo = {}  # bounded by the conversation, read whole anyway
        self.last: dict[str, hashchain.Chain] = {}  # each (sub-)conversation's last ids

    def flatten(self, ordinal: int) -> list[Item]:
        """(line_no, canonical record or RecordError, raw excerpt) of every request."""
        items: list[Item] = []
        previous: str | None = None
        for i, req in enumerate(self.obj["requests"]):
            where = f"requests[{i}]"
            if isinstance(req, dict) and req.get("type") == "subagent":
                items.extend(self._subagent(req, i, previous, ordinal + len(items)))
                continue
            rid = f"{self.key}:{i}"
            rec = self._request(req, where, rid, self.key, 0.0, previous)
            items.append((ordinal + len(items) + 1, rec, _excerpt(where, req)))
            previous = rid
        return items

    def _subagent(self, sub: dict, i: int, parent: str | None, ordinal: int) -> list[Item]:
        where = f"requests[{i}]"
        nested, t = sub.get("requests"), sub.get("t")
        if not isinstance(nested, list):
            err = RecordError(f"{where}.requests", "expected an array in a sub-agent")
            return [(ordinal + 1, err, _excerpt(where, sub))]
        if type(t) not in (int, float):
            err = RecordError(f"{where}.t", "expected seconds (a number) in a sub-agent")
            return [(ordinal + 1, err, _excerpt(where, sub))]
        agent = sub.get("agent_id") if isinstance(sub.get("agent_id"), str) else f"sub{i}"
        conversation = f"{self.key}/{agent}"
        items: list[Item] = []
        previous = parent
        for j, req in enumerate(nested):
            inner, rid = f"{where}.requests[{j}]", f"{self.key}:{i}.{j}"
            rec = self._request(req, inner, rid, conversation, float(t), previous)
            if isinstance(rec, dict) and sub.get("subagent_type") is not None:
                rec["subagent_type"] = sub["subagent_type"]
            items.append((ordinal + len(items) + 1, rec, _excerpt(inner, req)))
            previous = rid
        return items

    def _request(
        self, req: Any, where: str, rid: str, conversation: str, offset_s: float, parent: Any
    ) -> Any:
        """The canonical record of one request, or a RecordError naming its WEKA path."""
        if not isinstance(req, dict):
            return RecordError(where, f"expected a JSON object, got {type_name(req)}")
        rec = {k: v for k, v in req.items() if v is not None}
        for name in ("hash_ids", "in"):
            if name not in rec:
                return RecordError(f"{where}.{name}", "missing (required in a WEKA request)")
        out = {k: v for k, v in rec.items() if k not in _OWN_FIELDS}
        out.update(request_id=rid, conversation_id=conversation, parent_request_id=parent)
        try:
            out["timestamp"] = self._timestamp(rec, where, offset_s)
            if "ttft" in rec:
                out["ttft_ms"] = _seconds(rec["ttft"], f"{where}.ttft") * 1000.0
            out["block_hash_ids"] = self._global_ids(rec["hash_ids"], rec["in"], rid, conversation)
        except RecordError as err:
            return err
        out.update(block_size=BLOCK_SIZE, prompt_tokens=rec["in"])
        if "out" in rec:
            out["output_tokens"] = rec["out"]
        if "model" in rec:
            out["model_revision"] = rec["model"]
        return out

    def _timestamp(self, rec: dict, where: str, offset_s: float) -> float:
        if "timestamp" in rec:  # an absolute time on the request wins
            return parse_timestamp(rec["timestamp"])
        if "t" not in rec:
            raise RecordError(f"{where}.t", "missing (seconds from the conversation start)")
        return self.start_s + offset_s + _seconds(rec["t"], f"{where}.t")

    def _global_ids(self, local: Any, in_tokens: Any, rid: str, conversation: str) -> Any:
        """Chained, file-namespaced ids, plus a request-unique id for a partial tail block.
        The prefix shared with the conversation's previous request reuses its ids.

        Anything malformed is passed through for `validate_record` to reject with its reason.
        """
        ids = hashchain.chained(self.seed, local, self.memo, self.last.get(conversation))
        if ids is not local:  # chained (what it cannot chain comes back as it is)
            self.last[conversation] = (local, ids)  # a tail id appended below: never reused
        if not isinstance(ids, list) or type(in_tokens) is not int:
            return ids
        if in_tokens % BLOCK_SIZE and len(ids) == in_tokens // BLOCK_SIZE:
            ids.append(hashchain.int64(f"tail:{self.seed}:{rid}".encode()))
        return ids


def _seconds(value: Any, field: str) -> float:
    if type(value) not in (int, float):
        raise RecordError(field, f"expected seconds (a number), got {type_name(value)}")
    return float(value)


def _start_s(obj: dict[str, Any], key: str, path: Path) -> float:
    """The conversation's absolute start if it gives one, else its seeded offset."""
    for name in _START_FIELDS:
        if obj.get(name) is not None:
            try:
                return parse_timestamp(obj[name])
            except RecordError:
                raise InputFileError(
                    f"{path}: conversation {key}: {name} {obj[name]!r} is not a time"
                ) from None
    fraction = int.from_bytes(hashlib.sha256(f"hpa-weka-start:{key}".encode()).digest()[:8])
    return fraction / 2**64 * START_WINDOW_S


def _excerpt(where: str, req: Any) -> str:
    try:
        text = orjson.dumps(req).decode()
    except TypeError:  # an integer past 64 bits, which orjson cannot write
        text = json.dumps(req, separators=(",", ":"), ensure_ascii=False)
    return f"{where}: {text}"


ADAPTER = Adapter(NAME, read_weka, SOURCE, record=looks_like)
