"""vLLM benchmark results: the JSON that `vllm bench serve --save-result --save-detailed`
writes (`vllm/benchmarks/serve.py`), one object per line (`--append-result` adds a line per
run).

Per-request lists of equal length, in request order: `input_lens` (prompt tokens),
`output_lens`, `ttfts` (seconds), `start_times` (seconds of the client's
`time.perf_counter()`: an arbitrary origin, exact intervals) and `errors` ("" = ok); run-level
keys such as `model_id`, `num_prompts`, `request_rate`, `date`. No prompts are saved, so each
request's prompt becomes block hash ids of BLOCK_SIZE tokens, unique to the request, except
that the first `random_prefix_len // BLOCK_SIZE` blocks are shared by every request of the
run when the object has `random_prefix_len` (a number, or the string that `--metadata
random_prefix_len=N` saves): the random dataset puts that one prefix before every prompt.

Canonical record of request i of the object on line L: request_id = "<file scope>:L:i"
(`hashchain.file_scope`), timestamp = start_times[i], ttft_ms = 1000 x ttfts[i],
prompt_tokens = input_lens[i] exactly (the last block partial), output_tokens =
output_lens[i], block_size = BLOCK_SIZE, model_revision = model_id. A failed request
(non-empty errors[i]) is rejected at line L with field `errors[i]` and the error's last line
(a traceback's exception); a bad
entry with its list's name and index. A line that is not such an object, or lists of
different lengths, is a file error naming the field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from analyzer.errors import InputFileError
from analyzer.traces.adapters import Adapter, hashchain
from analyzer.traces.batches import Batch, SourceInfo, exact_batch
from analyzer.traces.jsonlines import json_line_chunks, non_finite_error
from analyzer.traces.records import RecordError, type_name

NAME = "vllm_bench"
BLOCK_SIZE = 16  # divides every model preset's block, so a replay matches at the preset's own
SOURCE = SourceInfo(
    BLOCK_SIZE,
    "vLLM benchmark result (vllm bench serve --save-result --save-detailed, "
    "vllm/benchmarks/serve.py), https://github.com/vllm-project/vllm, Apache-2.0",
)
REQUESTS_PER_BATCH = 8192
# The per-request lists a record is made of ("itls" and the rest are not stored).
_LISTS = ("input_lens", "output_lens", "ttfts", "start_times", "errors")
_KEY = re.compile(rb'"(input_lens|ttfts)"\s*:\s*\[')


def looks_like(first: Any, head: bytes) -> bool:
    """True for a vllm bench result: an object with `ttfts` and `input_lens` lists (lists of
    unequal lengths too: the reader then names the one that is short, rather than the file
    reading as JSON Lines of no request). A result longer than the first MiB (not decoded
    whole) is recognised by an object that opens with both keys' lists in that MiB."""
    if isinstance(first, dict):
        ttfts, lens = first.get("ttfts"), first.get("input_lens")
        return isinstance(ttfts, list) and isinstance(lens, list)
    if first is not None or head.lstrip()[:1] != b"{":
        return False
    line = head.lstrip().split(b"\n", 1)[0]
    return {m.group(1) for m in _KEY.finditer(line)} == {b"input_lens", b"ttfts"}


def read_vllm_bench(path: Path, stream: BinaryIO, progress: Callable[[], None]) -> Iterator[Batch]:
    """Batches of canonical rows from a vllm bench result file (one run per line)."""
    scope, digest = hashchain.file_scope(path)
    for items in json_line_chunks(path, stream, progress):
        for line_no, obj, raw in items:
            if isinstance(obj, RecordError):
                obj = _with_nan(path, line_no, obj, raw)
            run = _Run(path, line_no, obj, f"{scope}:{line_no}", f"vllm_bench:{digest}:{line_no}")
            for start in range(0, run.num_requests, REQUESTS_PER_BATCH):
                stop = min(start + REQUESTS_PER_BATCH, run.num_requests)
                yield exact_batch([run.item(i) for i in range(start, stop)])
                progress()


def _with_nan(path: Path, line_no: int, error: RecordError, raw: bytes) -> Any:
    """A result line orjson refused, read as vllm bench wrote it: Python's json writes NaN
    and Infinity (a mean of no values), which JSON has not. Each request's values are then
    checked one by one (`_Run._record`: a NaN TTFT rejects its request alone); a summary
    figure no request is read from changes nothing.

    Raises:
        InputFileError: the line is not JSON even so, or another error (a key given twice)."""
    if non_finite_error(raw) is None:
        raise InputFileError(f"{path}:{line_no}: not a vllm bench result ({error})")
    return json.loads(raw)


class _Run:
    """One result object: its lists checked, its shared prefix's block ids."""

    def __init__(self, path: Path, line_no: int, obj: Any, rid_prefix: str, namespace: str):
        where = f"{path}:{line_no}"
        if not isinstance(obj, dict):
            raise InputFileError(f"{where}: not a vllm bench result (a {type_name(obj)})")
        self.line_no, self.rid_prefix = line_no, rid_prefix
        self.lists: dict[str, list] = {}
        for name in _LISTS:
            value = obj.get(name)
            if not isinstance(value, list):
                why = "missing" if value is None else f"{type_name(value)}, not a list"
                raise InputFileError(
                    f"{where}: {name}: {why} (vllm bench serve writes the per-request "
                    "lists with --save-detailed)"
                )
            if name != _LISTS[0] and len(value) != len(self.lists[_LISTS[0]]):
                raise InputFileError(
                    f"{where}: {name}: {len(value):,} entries, but input_lens has "
                    f"{len(self.lists[_LISTS[0]]):,} (one per request)"
                )
            self.lists[name] = value
        self.num_requests = len(self.lists["input_lens"])
        model = obj.get("model_id")
        self.model = model if isinstance(model, str) and model else None
        self.seed = hashchain.seed(namespace)
        prefix_blocks = _prefix_len(where, obj.get("random_prefix_len")) // BLOCK_SIZE
        # Negative local ids: a request's own blocks (local id i >= 0) never equal the prefix's.
        self.prefix_ids = hashchain.chained(
            hashchain.seed(namespace + ":prefix"), [-(k + 1) for k in range(prefix_blocks)]
        )

    def item(self, i: int) -> tuple[int, Any, bytes]:
        entry = {name: self.lists[name][i] for name in _LISTS}
        raw = orjson.dumps({"request": i, **entry}, default=str)
        return self.line_no, self._record(i, entry), raw

    def _record(self, i: int, entry: dict[str, Any]) -> dict[str, Any] | RecordError:
        error = entry["errors"]
        if error:
            text = error if isinstance(error, str) else repr(error)
            last = [line.strip() for line in text.splitlines() if line.strip()][-1:] or [text]
            return RecordError(f"errors[{i}]", f"the request failed: {last[0][:300]}")
        tokens = entry["input_lens"]
        if type(tokens) is not int or tokens < 1:
            why = f"expected a positive integer, got {tokens!r}"
            return RecordError(f"input_lens[{i}]", why)
        ttft, start = entry["ttfts"], entry["start_times"]
        for name, value in (("ttfts", ttft), ("start_times", start)):
            if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
                why = f"expected non-negative seconds, got {value!r}"
                return RecordError(f"{name}[{i}]", why)
        record: dict[str, Any] = {
            "request_id": f"{self.rid_prefix}:{i}",
            "timestamp": float(start),
            "ttft_ms": 1000.0 * ttft,
            "block_hash_ids": self._block_ids(i, tokens),
            "block_size": BLOCK_SIZE,
            "prompt_tokens": tokens,
            "output_tokens": entry["output_lens"],
        }
        if self.model is not None:
            record["model_revision"] = self.model
        return record

    def _block_ids(self, i: int, tokens: int) -> list[int]:
        """The shared prefix's whole blocks within the prompt, then ids unique to request i."""
        shared = min(len(self.prefix_ids), tokens // BLOCK_SIZE)
        prev = self.prefix_ids[shared - 1] if shared else self.seed
        own = math.ceil(tokens / BLOCK_SIZE) - shared
        return self.prefix_ids[:shared] + hashchain.chained(prev, [i] * own)


def _prefix_len(where: str, value: Any) -> int:
    """`random_prefix_len` as a token count (0 when absent)."""
    if value is None:
        return 0
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if type(value) is int and value >= 0:
        return value
    raise InputFileError(
        f"{where}: random_prefix_len: expected a non-negative integer, got {value!r}"
    )


ADAPTER = Adapter(NAME, read_vllm_bench, SOURCE, record=looks_like)
