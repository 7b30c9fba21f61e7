"""vLLM server logs written with request logging on (`--enable-log-requests`; on by default
in older releases, which had `--disable-log-requests`), as printed by
`vllm/entrypoints/logger.py` (RequestLogger.log_inputs / log_outputs).

Lines used (after vLLM's `LEVEL MM-DD HH:MM:SS [file.py:N]` header, optionally behind a
`(APIServer pid=N)` prefix or colour codes):

- `Received request ID: prompt: '...', params: SamplingParams(...), prompt_token_ids:
  [..], [prompt_embeds shape: ..,] lora_request: .., [prompt_adapter_request: ..]` (v0.6 to
  v0.11.1, one line per request; also `sampling_params:` in older releases);
- `Request ID details: prompt: '...', prompt_token_ids: [..], prompt_embeds shape: ..`
  (v0.11.2 and later, vLLM PR #26713: DEBUG level only) followed by `Received request ID:
  params: .., lora_request: ..` (INFO);
- `Generated response ID: output: '...', output_token_ids: [..], finish_reason: ..`
  (`--enable-log-outputs`, v0.6 to v0.11.1): the output ids of a request still waiting;
- `Generated response ID details: output_token_ids: [..]` (DEBUG) followed by `Generated
  response ID: output: '...', finish_reason: ..` (INFO): the same in later releases (vLLM
  0.33: RequestLogger.log_outputs, vllm/entrypoints/serve/utils/request_logger.py:112-125);
- `Initializing a V1 LLM engine (vX) with config: model='M'`: model_revision = M for the
  requests that follow;
- `non-default args: {.., 'max_log_len': N, ..}` (vLLM 0.33, entrypoints/common/startup.py)
  or `args: Namespace(.., max_log_len=N, ..)` (older): the server cut every logged list to
  N ids (`--max-log-len`); no `max_log_len` among the non-default args: nothing was cut.

One record per request with token ids: request_id = the logged id, timestamp from its
line's header, prompt_token_ids, output_token_ids when its `Generated response` line
comes within WINDOW_LINES lines (streamed responses log no ids), lora_name. vLLM logs no
per-request cached-token count, so cached_tokens stays absent.

Time: the header has no year and no zone; see `logs.YearClock` (the year of the file's
modification time, UTC). Every other line is skipped and counted. A request line whose
token list is cut off, unparseable or not logged (`None`, or an INFO-only log of v0.11.2+)
is rejected with its line and reason, and so is an output line of a request whose prompt
line is not in the log (within WINDOW_LINES lines before it), once per request; a request
logged twice is stored once (ingest rejects the second, naming the first's line).

`--max-log-len N` cuts every logged prompt (text and ids) and output to N: nothing in a
request's line says so. The last batch carries `cut_at_tokens` (ingest flags the requests
whose prompt has exactly that many ids: they may be longer): N when the log names it (its
args line), else the longest prompt's length L when at least MIN_CUT prompts have exactly L
ids and at least MIN_CUT of them also have exactly L characters of prompt text, the mark of
vLLM cutting text and ids at the same N (a prompt of text has about 3 to 4 characters a
token, so fixed-length prompts of a benchmark do not carry it). See docs/traces.md.
"""

from __future__ import annotations

import re
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from analyzer.errors import InputFileError
from analyzer.traces.adapters import Adapter
from analyzer.traces.adapters.logs import (
    LogStats,
    ReprError,
    YearClock,
    canonical_batch,
    find_outside_strings,
    int_list_at,
    iso_seconds,
    long_line,
    plain,
    str_value,
    string_end,
    text_lines,
)
from analyzer.traces.batches import Batch, SourceInfo, excerpt
from analyzer.traces.jsonlines import LongLine
from analyzer.traces.records import RecordError

NAME = "vllm_log"
SOURCE = SourceInfo(
    None,
    "vLLM server log with --enable-log-requests (RequestLogger, vllm/entrypoints/logger.py), "
    "https://github.com/vllm-project/vllm, Apache-2.0",
)
WINDOW_LINES = 100_000  # a request waits this many lines for its `Generated response`
MIN_CUT = 3  # prompts at one length, cut as vLLM cuts, that make a log's lists cut
MAX_PENDING_TOKENS = 16 << 20  # ... and is stored without it when more tokens wait

_HEADER = re.compile(
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?"
)
_INPUTS = re.compile(r"Received request (.+?): prompt: |Request (.+?) details: prompt: ")
_PARAMS = re.compile(r"Received request (.+?): params: ")
_OUTPUT = re.compile(r"Generated response (.+?)( \(streaming (?:delta|complete)\))?: output: ")
_DETAILS = re.compile(
    r"Generated response (.+?)( \(streaming (?:delta|complete)\))? details: output_token_ids: "
)
_MESSAGES = (("inputs", _INPUTS), ("params", _PARAMS), ("output", _OUTPUT), ("ids", _DETAILS))
_ARGS = re.compile(r"non-default args: \{|args: Namespace\(")
_MAX_LOG_LEN = re.compile(r"'max_log_len': (\d+|None)|max_log_len=(\d+|None)")
_ENGINE = re.compile(r"Initializing an? (?:V1 )?LLM engine \(v[^)]*\) with config: model='([^']*)'")
_LORA = re.compile(r"lora_request: LoRARequest\(lora_name='([^']*)'")
_NO_PROMPT = (
    f"missing: an output line of a request with no prompt line in the {WINDOW_LINES:,} "
    "lines before it (the log starts after its request, or prompts were not logged)"
)
_NOT_LOGGED = (
    "not logged: vLLM >= 0.11.2 logs prompt token ids only at DEBUG level "
    "(VLLM_LOGGING_LEVEL=DEBUG with --enable-log-requests)"
)


def looks_like(head: bytes) -> bool:
    """True when the start of a file holds vLLM request log lines."""
    text = head.decode("utf-8", "replace")
    return _HEADER.search(text) is not None and (
        _INPUTS.search(text) is not None or _PARAMS.search(text) is not None
    )


@dataclass
class _Pending:
    line_no: int
    record: dict[str, Any]
    raw: str
    num_tokens: int


@dataclass
class _Cut:
    """What says whether the log cut its lists (`--max-log-len`): the value its args line
    names (`declared`), and the longest prompts: their length, how many, and how many of
    them have as many characters of text as ids (`signed`)."""

    declared: set[int | None] = field(default_factory=set)
    max_len: int = 0
    at_max: int = 0
    signed: int = 0

    def prompt(self, num_ids: int, text_chars: Callable[[], int | None]) -> None:
        if num_ids < self.max_len or not num_ids:
            return
        if num_ids > self.max_len:
            self.max_len, self.at_max, self.signed = num_ids, 0, 0
        self.at_max += 1
        self.signed += text_chars() == num_ids

    def cut_at(self) -> int | None:
        """The length at which the log's lists may be cut, None when they are whole."""
        if self.declared:
            named = [n for n in self.declared if n is not None]
            return max(named) if named else None
        if self.at_max >= MIN_CUT and self.signed >= MIN_CUT:
            return self.max_len
        return None


@dataclass
class _Scan:
    """The state of one file's scan: requests waiting for their output, and counts."""

    clock: YearClock
    model: str | None = None
    cut: _Cut = field(default_factory=_Cut)
    pending: OrderedDict[str, _Pending] = field(default_factory=OrderedDict)
    pending_tokens: int = 0
    recent: OrderedDict[str, None] = field(default_factory=OrderedDict)
    ready: list[tuple[int, Any, str]] = field(default_factory=list)
    stats: LogStats = field(default_factory=LogStats)


def read_vllm_log(
    path: Path, stream: BinaryIO, progress: Callable[[], None], stats: LogStats | None = None
) -> Iterator[Batch]:
    """Batches of canonical rows from a vLLM server log; `stats` receives the line counts."""
    scan = _Scan(YearClock(datetime.fromtimestamp(path.stat().st_mtime, UTC)))
    if stats is not None:
        scan.stats = stats
    for piece in text_lines(stream, progress):
        if isinstance(piece, LongLine):
            scan.ready.append(long_line(scan.stats, piece))
            continue
        first, lines = piece
        for offset, line in enumerate(lines):
            if scan.pending:
                _expire(scan, first + offset)
            _line(scan, first + offset, line)
        yield scan.stats.stamp(_ready_batch(scan))
    _expire(scan, None)
    last = _ready_batch(scan)
    last.cut_at_tokens = scan.cut.cut_at()
    yield scan.stats.stamp(last)
    if not scan.stats.num_request_lines:
        raise InputFileError(
            f"{path}: no vLLM request lines ('Received request ...') among "
            f"{scan.stats.num_skipped:,} lines; was the server started with --enable-log-requests?"
        )


def _line(scan: _Scan, line_no: int, line: str) -> None:
    if (  # chained `in` tests: a third of any() over a tuple's cost, on every line of the log
        "equest " not in line
        and "Generated response " not in line
        and "LLM engine" not in line
        and "args: " not in line
    ):
        scan.stats.num_skipped += 1
        return
    line = plain(line)
    # The first message wins: a prompt or output text may quote any of them.
    found = [(m.start(), kind, m) for kind, pattern in _MESSAGES if (m := pattern.search(line))]
    kind, m = min(found, key=lambda f: f[0])[1:] if found else (None, None)
    if kind == "inputs":
        _inputs(scan, line_no, line, m)
    elif kind == "params":
        _params(scan, line_no, line, m.group(1))
    elif kind in ("output", "ids"):
        _output(scan, line_no, line, m, kind)
    else:
        if (engine := _ENGINE.search(line)) is not None:
            scan.model = engine.group(1)
        elif (args := _ARGS.search(line)) is not None:
            value = _MAX_LOG_LEN.search(line, args.end())
            given = None if value is None else value.group(1) or value.group(2)
            scan.cut.declared.add(None if given in (None, "None") else int(given))
        scan.stats.num_skipped += 1


def _inputs(scan: _Scan, line_no: int, line: str, m: re.Match) -> None:
    """A request line with its prompt: a pending record, or a reject."""
    scan.stats.num_request_lines += 1
    rid = m.group(1) or m.group(2)
    _seen(scan, rid)  # its INFO line, if one follows, belongs to this request
    if (first := scan.pending.get(rid)) is not None:  # the first keeps its output lines
        reason = f"duplicate {rid!r}: the request was logged twice (first at line {first.line_no})"
        scan.ready.append((line_no, RecordError("request_id", reason), line))
        return
    try:
        ids, end = _prompt_ids(line, m.end())
    except ReprError as err:
        scan.ready.append((line_no, RecordError("prompt_token_ids", str(err)), line))
        return
    if ids is None:
        reason = "None in the log (this vLLM logged no token ids for the request)"
        scan.ready.append((line_no, RecordError("prompt_token_ids", reason), line))
        return
    record: dict[str, Any] = {"request_id": rid, "prompt_token_ids": _compact(ids)}
    try:
        seconds = _seconds(scan, line[: m.start()])
    except RecordError as err:  # a header that is no date and time: this line's reject
        scan.ready.append((line_no, err, line))
        return
    if seconds is not None:
        record["timestamp"] = seconds
    if scan.model is not None:
        record["model_revision"] = scan.model
    if (lora := _LORA.search(line, end)) is not None:
        record["lora_name"] = lora.group(1)
    scan.cut.prompt(len(ids), lambda: _text_chars(line, m.end()))
    _hold(scan, rid, _Pending(line_no, record, excerpt(line), len(ids)))


def _seen(scan: _Scan, rid: str) -> None:
    """Remember that request `rid` had a request line (its output lines belong to it)."""
    scan.recent[rid] = None
    scan.recent.move_to_end(rid)
    if len(scan.recent) > WINDOW_LINES:
        scan.recent.popitem(last=False)


def _text_chars(line: str, pos: int) -> int | None:
    """The number of characters of the prompt text logged at line[pos] (None: no text)."""
    end = string_end(line, pos) if line[pos : pos + 1] in ("'", '"') else -1
    text = str_value(line, (pos, end)) if end > 0 else None
    return None if text is None else len(text)


def _prompt_ids(line: str, pos: int) -> tuple[list[int] | None, int]:
    """The prompt token ids after `prompt: <repr>`, skipping the text (it may hold anything)."""
    if line.startswith("None", pos):
        pos += 4
    elif line[pos : pos + 1] in ("'", '"'):
        pos = string_end(line, pos)
        if pos < 0:
            raise ReprError("the log line is cut off inside the prompt text")
    else:
        raise ReprError(f"expected the prompt's repr, got {line[pos : pos + 20]!r}")
    label = find_outside_strings(line, "prompt_token_ids: ", pos)
    if label < 0:
        raise ReprError("missing from the request line (the log line was truncated?)")
    return int_list_at(line, label + len("prompt_token_ids: "))


def _params(scan: _Scan, line_no: int, line: str, rid: str) -> None:
    """v0.11.2+'s INFO line: completes the DEBUG line's record, or is a request without ids."""
    pending = scan.pending.get(rid)
    if pending is not None or rid in scan.recent:
        scan.stats.num_skipped += 1
        lora = _LORA.search(line)
        if pending is not None and lora is not None:
            pending.record.setdefault("lora_name", lora.group(1))
        return
    scan.stats.num_request_lines += 1
    _seen(scan, rid)  # its output lines are not requests of their own
    scan.ready.append((line_no, RecordError("prompt_token_ids", _NOT_LOGGED), line))


def _output(scan: _Scan, line_no: int, line: str, m: re.Match, kind: str) -> None:
    """An output line: ids for a request still waiting (the INFO line completes it; in
    0.33 its DEBUG `details` line with the ids comes just before). A request with no prompt
    line is rejected at its first output line; a streamed response's lines log no ids."""
    rid = m.group(1)
    pending = scan.pending.get(rid)
    if pending is None and rid not in scan.recent:
        scan.stats.num_request_lines += 1
        _seen(scan, rid)
        scan.ready.append((line_no, RecordError("prompt_token_ids", _NO_PROMPT), line))
        return
    scan.stats.num_skipped += 1
    if pending is None or m.group(2) is not None:  # streamed responses log text only
        return
    ids = _output_ids(line, m.end(), kind)
    if ids is not None:
        pending.record["output_token_ids"] = ids
    if kind == "output":
        _release(scan, rid)


def _output_ids(line: str, pos: int, kind: str) -> list[int] | None:
    """The output ids of an output line (None: not logged, or the line is cut off)."""
    if kind == "output":  # the ids follow the text on the older single line
        if line[pos : pos + 1] in ("'", '"'):
            pos = string_end(line, pos)
        label = find_outside_strings(line, "output_token_ids: ", pos) if pos >= 0 else -1
        if label < 0:
            return None
        pos = label + len("output_token_ids: ")
    try:
        return int_list_at(line, pos)[0]
    except ReprError:
        return None  # a cut-off output line: the prompt is still good


def _seconds(scan: _Scan, prefix: str) -> float | None:
    m = _HEADER.search(prefix)
    if m is None:
        return iso_seconds(prefix)  # a collector's own timestamp, if any
    month, day, hour, minute, second = (int(g) for g in m.groups()[:5])
    micros = int((m.group(6) or "0").ljust(6, "0"))
    return scan.clock.seconds(month, day, (hour, minute, second), micros)


def _compact(ids: list) -> array | list:
    """Token ids as 4-byte ints while they wait (a list when out of range: rejected later)."""
    try:
        return array("i", ids)
    except (OverflowError, TypeError):
        return ids


def _hold(scan: _Scan, rid: str, pending: _Pending) -> None:
    scan.pending[rid] = pending
    scan.pending_tokens += pending.num_tokens
    while scan.pending_tokens > MAX_PENDING_TOKENS:
        _release(scan, next(iter(scan.pending)))


def _release(scan: _Scan, rid: str) -> None:
    pending = scan.pending.pop(rid)
    scan.pending_tokens -= pending.num_tokens
    record = pending.record
    if isinstance(record["prompt_token_ids"], array):
        record["prompt_token_ids"] = record["prompt_token_ids"].tolist()
    scan.ready.append((pending.line_no, record, pending.raw))


def _expire(scan: _Scan, line_no: int | None) -> None:
    """Store requests that waited WINDOW_LINES lines (all of them at the end of the file)."""
    while scan.pending:
        rid, oldest = next(iter(scan.pending.items()))
        if line_no is not None and oldest.line_no > line_no - WINDOW_LINES:
            return
        _release(scan, rid)


def _ready_batch(scan: _Scan) -> Batch:
    ready, scan.ready = sorted(scan.ready, key=lambda item: item[0]), []
    return canonical_batch(ready)


ADAPTER = Adapter(NAME, read_vllm_log, SOURCE, text=looks_like)
