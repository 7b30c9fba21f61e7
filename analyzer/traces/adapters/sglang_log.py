"""SGLang server logs written with `--log-requests` (RequestLogger in
`python/sglang/srt/utils/request_logger.py`; earlier in `managers/tokenizer_manager.py`).

Lines used, after SGLang's `[YYYY-MM-DD HH:MM:SS( TPn)]` header:

- `Finish: obj=GenerateReqInput(rid='..', input_ids=[..], ..), out={'text': '..',
  'output_ids': [..], 'meta_info': {'id': '..', 'prompt_tokens': N, 'cached_tokens': M,
  'completion_tokens': K, 'e2e_latency': S, ..}}`: one record per line;
- `Receive: obj=GenerateReqInput(rid='..', ..)`: the request's arrival time;
- `in=GenerateReqInput(..), out={..}`: the Finish line of releases before v0.4;
- `--log-requests-format json` lines (`{"event": "request.finished", "rid": .., "obj":
  {..}, "out": {..}}`, `request.received`), the same fields as JSON;
- `server_args=ServerArgs(model_path='M', ..)`, or `server_args={'model_path': 'M', ..}`
  (0.5.x: python/sglang/srt/entrypoints/engine.py:311): model_revision = M for what follows.

Canonical record: request_id = rid (else meta_info.id), prompt_token_ids = input_ids,
prompt_tokens = meta_info.prompt_tokens (so a disagreement is a reject), cached_tokens =
meta_info.cached_tokens, output_token_ids = output_ids when their count equals
completion_tokens (a streamed or cut list is dropped), else output_tokens =
completion_tokens, lora_name = lora_path. Timestamp: the request's `Receive` line when
seen, else the `Finish` line's time minus e2e_latency, else the `Finish` line's time;
SGLang logs local time without a zone, taken as UTC.

Levels: `--log-requests-level` 0 and 1 omit input_ids and level 2 cuts lists longer than
2048 ids (`[..] ... [..]`): such requests are rejected with the reason; use level 3. A
request sent as text (not ids) logs input_ids=None and is rejected too. Every other line
is skipped and counted.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from analyzer.errors import InputFileError
from analyzer.traces.adapters import Adapter
from analyzer.traces.adapters.logs import (
    LogStats,
    ReprError,
    canonical_batch,
    fields,
    find_outside_strings,
    int_list_field,
    int_value,
    iso_seconds,
    long_line,
    number_value,
    plain,
    str_value,
    text_lines,
)
from analyzer.traces.batches import Batch, SourceInfo
from analyzer.traces.jsonlines import LongLine, non_finite_error
from analyzer.traces.records import RecordError

NAME = "sglang_log"
SOURCE = SourceInfo(
    None,
    "SGLang server log with --log-requests (RequestLogger, "
    "python/sglang/srt/utils/request_logger.py), https://github.com/sgl-project/sglang, "
    "Apache-2.0",
)
MAX_ARRIVALS = 1 << 20  # Receive times kept for requests not finished yet

# `Finish: obj=..` since v0.4; `in=GenerateReqInput(..), out={..}` before (also a finish).
_EVENT = re.compile(r"(Receive|Finish): obj=\w+\(|(?<!\w)in=(?=\w+ReqInput\()\w+\(")
_JSON_EVENT = re.compile(r'"event": ?"request\.(received|finished)"')
_SERVER_ARGS = re.compile(r"server_args=(?:ServerArgs\(model_path=|\{'model_path': )'([^']*)'")
_MARKERS = ("obj=", "in=", '"event"', "server_args=")  # cheap test before the regexes
_META = ("id", "prompt_tokens", "completion_tokens", "cached_tokens", "e2e_latency")
_NOT_LOGGED = (
    "not logged (None): --log-requests-level 0/1 omit input_ids and a request sent as "
    "text has none; log ids with --log-requests-level 3"
)


def looks_like(head: bytes) -> bool:
    """True when the start of a file holds SGLang request log lines."""
    return _EVENT.search(head.decode("utf-8", "replace")) is not None


def looks_like_json(first: Any) -> bool:
    """True when a JSON Lines file's first record is an SGLang JSON request log event."""
    return (
        isinstance(first, dict)
        and str(first.get("event", "")).startswith("request.")
        and "rid" in first
        and "obj" in first
    )


@dataclass
class _Scan:
    model: str | None = None
    arrivals: OrderedDict[str, float] = field(default_factory=OrderedDict)
    stats: LogStats = field(default_factory=LogStats)


@dataclass(frozen=True)
class _Finish:
    """The decoded fields of one Finish line (text or JSON)."""

    rid: Any
    input_ids: Any
    output_ids: Any
    meta: dict[str, Any]
    lora: Any


def read_sglang_log(
    path: Path, stream: BinaryIO, progress: Callable[[], None], stats: LogStats | None = None
) -> Iterator[Batch]:
    """Batches of canonical rows from an SGLang server log; `stats` receives line counts."""
    scan = _Scan(stats=stats if stats is not None else LogStats())
    for piece in text_lines(stream, progress):
        if isinstance(piece, LongLine):
            yield scan.stats.stamp(canonical_batch([long_line(scan.stats, piece)]))
            continue
        first, lines = piece
        items = []
        for offset, line in enumerate(lines):
            item = _line(scan, line)
            if item is not None:
                items.append((first + offset, item, line))
        yield scan.stats.stamp(canonical_batch(items))
    if not scan.stats.num_request_lines:
        raise InputFileError(
            f"{path}: no SGLang request lines ('Finish: obj=...') among "
            f"{scan.stats.num_skipped:,} lines; was the server started with --log-requests?"
        )


def _line(scan: _Scan, line: str) -> Any:
    """The canonical record (or RecordError) of a Finish line; None for any other line."""
    if not any(marker in line for marker in _MARKERS):
        scan.stats.num_skipped += 1
        return None
    line = plain(line)
    m, json_event = _EVENT.search(line), _JSON_EVENT.search(line)
    if json_event is not None and (m is None or json_event.start() < m.start()):
        return _json_event(scan, line, json_event.group(1))  # a text prompt may quote either
    if m is None:
        if (args := _SERVER_ARGS.search(line)) is not None:
            scan.model = args.group(1)
        scan.stats.num_skipped += 1
        return None
    seconds = iso_seconds(line[: m.start()])
    if m.group(1) == "Receive":
        _arrival(scan, _receive_rid(line, m.end() - 1), seconds)
        return None
    scan.stats.num_request_lines += 1
    try:
        finish = _text_finish(line, m.end() - 1)
    except RecordError as err:
        return err
    return _record(scan, finish, seconds)


def _text_finish(line: str, open_at: int) -> _Finish:
    """The fields of a text `Finish: obj=X(..), out={..}` line; raises RecordError."""
    try:
        obj, after = fields(line, open_at)
    except ReprError as err:
        raise RecordError("obj", str(err)) from None
    out: dict[str, tuple[int, int]] = {}
    meta: dict[str, tuple[int, int]] = {}
    at = find_outside_strings(line, "out={", after)
    if at >= 0:
        try:
            out, _ = fields(line, at + 4)
            if "meta_info" in out and line[out["meta_info"][0]] == "{":
                meta, _ = fields(line, out["meta_info"][0])
        except ReprError as err:
            raise RecordError("out", str(err)) from None
    try:
        input_ids = int_list_field(line, obj.get("input_ids"))
    except ReprError as err:
        raise RecordError("input_ids", str(err)) from None
    try:
        output_ids = int_list_field(line, out.get("output_ids"))
    except ReprError:
        output_ids = None  # cut or streamed: output_tokens still comes from meta_info
    values: dict[str, Any] = {}
    for name in _META:
        span = meta.get(name, out.get(name))
        try:
            if name == "id":
                values[name] = str_value(line, span)
            elif name == "e2e_latency":
                values[name] = number_value(line, span)
            else:
                values[name] = int_value(line, span)
        except ReprError as err:
            raise RecordError(f"meta_info.{name}", str(err)) from None
    rid, span = str_value(line, obj.get("rid")), obj.get("rid")
    if rid is None and span is not None and (value := line[span[0] : span[1]].strip()) != "None":
        raise RecordError("rid", f"expected one request id (a string), got {value:.40}")
    return _Finish(rid, input_ids, output_ids, values, str_value(line, obj.get("lora_path")))


def _receive_rid(line: str, open_at: int) -> str | None:
    try:
        obj, _ = fields(line, open_at)
    except ReprError:
        return None  # a Receive line only dates a request; a cut one is not an error
    return str_value(line, obj.get("rid"))


def _json_event(scan: _Scan, line: str, event: str) -> Any:
    """A `--log-requests-format json` line: a Finish record, or a Receive time."""
    try:
        data = orjson.loads(line[line.index("{") :])
    except (ValueError, orjson.JSONDecodeError) as exc:
        if event == "received":
            scan.stats.num_skipped += 1
            return None
        scan.stats.num_request_lines += 1
        named = non_finite_error(line[line.find("{") :]) if "{" in line else None
        return named or RecordError(None, f"malformed JSON ({exc})")
    stamp = data.get("timestamp")
    seconds = iso_seconds(stamp) if isinstance(stamp, str) else None
    obj = data.get("obj") if isinstance(data.get("obj"), dict) else {}
    if event == "received":
        _arrival(scan, data.get("rid"), seconds)
        return None
    scan.stats.num_request_lines += 1
    out = data.get("out") if isinstance(data.get("out"), dict) else {}
    meta = out.get("meta_info") if isinstance(out.get("meta_info"), dict) else out
    finish = _Finish(
        data.get("rid", obj.get("rid")),
        _json_ids(obj.get("input_ids"), "input_ids"),
        out.get("output_ids"),
        {name: meta.get(name) for name in _META},
        obj.get("lora_path"),
    )
    if isinstance(finish.input_ids, RecordError):
        return finish.input_ids
    return _record(scan, finish, seconds)


def _json_ids(ids: Any, name: str) -> Any:
    if isinstance(ids, list) and "..." in ids:
        return RecordError(name, "the token list is cut in the log (its middle is '...')")
    return ids


def _arrival(scan: _Scan, rid: Any, seconds: float | None) -> None:
    scan.stats.num_skipped += 1
    if isinstance(rid, str) and seconds is not None:
        scan.arrivals[rid] = seconds
        if len(scan.arrivals) > MAX_ARRIVALS:
            scan.arrivals.popitem(last=False)


def _record(scan: _Scan, finish: _Finish, finished_s: float | None) -> Any:
    """The canonical record of a finished request (or RecordError)."""
    meta = finish.meta
    rid = finish.rid if finish.rid is not None else meta.get("id")
    if not isinstance(rid, str):
        return RecordError("rid", f"expected one request id (a string), got {rid!r:.40}")
    if finish.input_ids is None:
        return RecordError("input_ids", _NOT_LOGGED)
    record: dict[str, Any] = {"request_id": rid, "prompt_token_ids": finish.input_ids}
    for name in ("prompt_tokens", "cached_tokens"):
        if meta.get(name) is not None:
            record[name] = meta[name]
    completion = meta.get("completion_tokens")
    outputs = finish.output_ids
    complete = isinstance(outputs, list) and "..." not in outputs
    if complete and (completion is None or len(outputs) == completion):
        record["output_token_ids"] = outputs
    elif completion is not None:
        record["output_tokens"] = completion
    arrival = scan.arrivals.pop(rid, None)
    latency = meta.get("e2e_latency")
    if arrival is None and finished_s is not None:
        ok = isinstance(latency, int | float) and not isinstance(latency, bool) and latency >= 0
        arrival = finished_s - latency if ok else finished_s
    if arrival is not None:
        record["timestamp"] = arrival
    if scan.model is not None:
        record["model_revision"] = scan.model
    if isinstance(finish.lora, str):
        record["lora_name"] = finish.lora
    return record


ADAPTER = Adapter(
    NAME,
    read_sglang_log,
    SOURCE,
    record=lambda first, head: looks_like_json(first),
    text=looks_like,
)
