"""OpenAI-format chat and completion logs, tokenized with the served model's tokenizer.

What gateways keep of each request is its text, not its token ids; `hpa ingest --tokenizer
PATH` makes the ids the server made (`analyzer.traces.text`: the chat template with the
generation prompt, then the tokenizer). One JSON object per line, in any of these shapes
(field names as the OpenAI API, LiteLLM's StandardLoggingPayload and a request/response
pair name them):

- a request/response pair: ``{"request": {...}, "response": {...}}``, the request body
  (`model`, `messages`, `tools`, or `prompt`) and the response body (`id`, `created`,
  `usage`); OpenAI batch lines' ``{"custom_id", "body": {...}}`` and ``"response": {"body":
  {...}}`` too;
- LiteLLM's StandardLoggingPayload: `id`, `startTime`, `model`, `messages`, `response`
  (the response object) and `model_parameters` (its `tools`);
- a request body alone, with `usage` beside it or not: ``{"model": ..., "messages": [...]}``
  or a completion log's ``{"prompt": "..."}``.

Canonical record: request_id = `request_id`, else `id`, `custom_id`, the response's `id`,
else "<file scope>:<line>" (`hashchain.file_scope`); timestamp = `timestamp`, else
`startTime` / `start_time`, else the response's `created` (seconds or RFC 3339);
model_revision = the request's `model`; prompt_token_ids = the tokenized text;
output_tokens = usage.completion_tokens; cached_tokens =
usage.prompt_tokens_details.cached_tokens (what `hpa validate` compares with); a
usage.prompt_tokens that differs from the ids' count rejects the record (another tokenizer or
template than the server's). conversation_id, parent_request_id, tenant, prompt_family and
the other canonical string fields are kept where the line gives them at its top level.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from analyzer.errors import InputFileError
from analyzer.traces.adapters import Adapter, hashchain
from analyzer.traces.batches import Batch, SourceInfo, exact_batch
from analyzer.traces.jsonlines import json_line_chunks
from analyzer.traces.records import (
    STRING_FIELDS,
    TOKEN_LIST_FIELDS,
    RecordError,
    type_name,
)

if TYPE_CHECKING:
    from analyzer.traces.text import ChatTokenizer

NAME = "chat"
SOURCE = SourceInfo(
    None,
    "OpenAI chat/completion request log (a gateway's: LiteLLM, OpenTelemetry, request/response "
    "pairs), tokenized with the served model's tokenizer (--tokenizer)",
)
_ID_KEYS = ("request_id", "id", "custom_id", "litellm_call_id")
_TIME_KEYS = ("timestamp", "startTime", "start_time")
_KEPT = tuple(k for k in STRING_FIELDS if k not in ("request_id", "model_revision"))


def looks_like(first: Any) -> bool:
    """True when a file's first record holds text to tokenize (messages or a prompt) and no
    token ids or block hashes."""
    if not isinstance(first, dict) or any(
        k in first for k in (*TOKEN_LIST_FIELDS, "block_hash_ids", "hash_ids")
    ):
        return False
    body = _body(first)
    return isinstance(body.get("messages"), list) or isinstance(body.get("prompt"), str)


def _body(rec: dict[str, Any]) -> dict[str, Any]:
    """The request body of a line: its `request`, an OpenAI batch line's `body`, or itself."""
    for key in ("request", "body"):
        if isinstance(rec.get(key), dict):
            return rec[key]
    return rec


def _response(rec: dict[str, Any]) -> dict[str, Any]:
    response = rec.get("response")
    if not isinstance(response, dict):
        return {}
    return response["body"] if isinstance(response.get("body"), dict) else response


def read_chat(path: Path, stream: BinaryIO, progress: Callable[[], None]) -> Iterator[Batch]:
    """Without a tokenizer a chat log cannot be read: it holds text, not ids."""
    raise InputFileError(
        f"{path}: a chat/completion log holds text, not token ids: pass --tokenizer PATH "
        "(the served model's folder, with tokenizer.json and tokenizer_config.json) to "
        "tokenize it as the server did"
    )
    yield  # pragma: no cover (a generator, as every reader is)


def reader(tokenizer: ChatTokenizer) -> Callable[[Path, BinaryIO, Callable[[], None]], Iterator]:
    """The chat log reader that tokenizes with `tokenizer`."""

    def read(path: Path, stream: BinaryIO, progress: Callable[[], None]) -> Iterator[Batch]:
        # the file is read once more for its digest only where a line has no id of its own
        scope = cache(lambda: hashchain.file_scope(path)[0])
        for items in json_line_chunks(path, stream, progress):
            yield exact_batch(_tokenized(tokenizer, scope, items))

    return read


def tokenizer_at(path: str | None) -> ChatTokenizer | None:
    """The tokenizer of `--tokenizer` (None without one), loaded before any file is read:
    a ConfigError says why a path is not one (analyzer.traces.text)."""
    if path is None:
        return None
    from analyzer.traces.text import load

    return load(path)


def reader_or(default: Callable, fmt: str, tokenizer: ChatTokenizer | None) -> Callable:
    """The reader of a file of format `fmt`: a chat log's tokenizes with `tokenizer`."""
    return reader(tokenizer) if fmt == NAME and tokenizer is not None else default


def provenance(fmt: str, tokenizer: ChatTokenizer | None) -> dict[str, str | None]:
    """The `sources` columns of a file of format `fmt`: the tokenizer's folder name and the
    sha256 of its tokenizer.json and chat template when it made the file's ids, else null."""
    used = fmt == NAME and tokenizer is not None
    return {
        "tokenizer": tokenizer.name if used else None,
        "tokenizer_sha256": tokenizer.tokenizer_sha256 if used else None,
        "chat_template_sha256": tokenizer.chat_template_sha256 if used else None,
    }


def unused(tokenizer: ChatTokenizer | None, formats: list[str]) -> tuple[str, ...]:
    """The warning for a --tokenizer that no file (of `formats`) needed."""
    if tokenizer is None or NAME in formats:
        return ()
    return (
        "--tokenizer was not used: no file is a chat or completion log (format chat); the "
        "traces' own ids are stored",
    )


def _tokenized(tokenizer: ChatTokenizer, scope: Callable[[], str], items: list) -> list:
    """(line_no, canonical record or RecordError, raw) of a chunk: texts rendered one by
    one, then tokenized together (the tokenizer's threads)."""
    from analyzer.traces.text import TemplateRefused

    out, chats, prompts = [], [], []
    for n, obj, raw in items:
        try:
            rec, text, is_chat = _request(tokenizer, scope, n, obj)
        except RecordError as err:
            out.append((n, err, raw))
            continue
        except TemplateRefused as refused:
            out.append((n, RecordError("messages", str(refused)), raw))
            continue
        (chats if is_chat else prompts).append(len(out))
        out.append((n, (rec, text), raw))
    for where, encode in ((chats, tokenizer.chat_ids), (prompts, tokenizer.prompt_ids)):
        ids = encode([out[i][1][1] for i in where]) if where else []
        for i, token_ids in zip(where, ids, strict=True):
            n, (rec, _), raw = out[i]
            out[i] = (n, _with_ids(rec, token_ids), raw)
    return out


def _request(
    tokenizer: ChatTokenizer, scope: Callable[[], str], n: int, obj: Any
) -> tuple[dict, str, bool]:
    """(canonical record without ids, text to tokenize, whether it is a chat) of one line."""
    if isinstance(obj, RecordError):
        raise obj
    if not isinstance(obj, dict):
        raise RecordError(None, f"expected a JSON object, got {type_name(obj)}")
    body, response = _body(obj), _response(obj)
    rec: dict[str, Any] = {k: obj[k] for k in _KEPT if obj.get(k) is not None}
    rec["request_id"] = _request_id(obj, body, response, scope, n)
    if (stamp := _first(obj, _TIME_KEYS, response.get("created"))) is not None:
        rec["timestamp"] = stamp
    if body.get("model") is not None:
        rec["model_revision"] = body["model"]
    _usage(obj, response, rec)
    messages, prompt = body.get("messages"), body.get("prompt")
    if messages is not None:
        if not isinstance(messages, list):
            raise RecordError("messages", f"expected an array, got {type_name(messages)}")
        if not messages:
            raise RecordError("messages", "empty array (a chat needs a message)")
        tools = body.get("tools")
        if tools is None and isinstance(obj.get("model_parameters"), dict):
            tools = obj["model_parameters"].get("tools")
        if tools is not None and not isinstance(tools, list):
            raise RecordError("tools", f"expected an array, got {type_name(tools)}")
        kwargs = body.get("chat_template_kwargs")
        kwargs = kwargs if isinstance(kwargs, dict) else None
        return rec, tokenizer.render(messages, tools, kwargs), True
    if isinstance(prompt, str):
        if not prompt:
            raise RecordError("prompt", "empty string (a request needs at least one token)")
        return rec, prompt, False
    if prompt is not None:
        raise RecordError(
            "prompt", f"expected a string, got {type_name(prompt)} (one request a line)"
        )
    raise RecordError("messages", "missing (a chat request's messages, or a completion's prompt)")


def _first(obj: dict[str, Any], keys: tuple[str, ...], default: Any = None) -> Any:
    return next((obj[k] for k in keys if obj.get(k) is not None), default)


def _request_id(obj: dict, body: dict, response: dict, scope: Callable[[], str], n: int) -> str:
    found = _first(obj, _ID_KEYS, _first(body, ("request_id",), response.get("id")))
    if found is None:
        return f"{scope()}:{n}"
    if not isinstance(found, (str, int)) or isinstance(found, bool):
        raise RecordError("request_id", f"expected a string, got {type_name(found)}")
    return str(found)


def _usage(obj: dict, response: dict, rec: dict) -> None:
    """output_tokens, cached_tokens and the server's prompt_tokens from `usage`."""
    usage = response.get("usage", obj.get("usage"))
    if usage is None:
        return
    if not isinstance(usage, dict):
        raise RecordError("usage", f"expected an object, got {type_name(usage)}")
    if usage.get("completion_tokens") is not None:
        rec["output_tokens"] = usage["completion_tokens"]
    if usage.get("prompt_tokens") is not None:
        rec["prompt_tokens"] = usage["prompt_tokens"]
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        rec["cached_tokens"] = details["cached_tokens"]


def _with_ids(rec: dict[str, Any], ids: list[int]) -> dict[str, Any] | RecordError:
    claimed = rec.pop("prompt_tokens", None)
    if claimed is not None and claimed != len(ids):
        return RecordError(
            "usage.prompt_tokens",
            f"{claimed} but the tokenizer gives {len(ids)} tokens (is it the served model's "
            "tokenizer and chat template?)",
        )
    if not ids:
        return RecordError("messages", "renders to no tokens")
    rec["prompt_token_ids"] = ids
    return rec


ADAPTER = Adapter(NAME, read_chat, SOURCE, record=lambda first, head: looks_like(first))
