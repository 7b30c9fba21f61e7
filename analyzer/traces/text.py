"""Text to token ids as the server makes them: the served model's own tokenizer and chat template.

`load(PATH)` reads a local model folder (its `tokenizer.json` and `tokenizer_config.json`,
and `chat_template.jinja` when the folder has one) or a `tokenizer.json` with its
`tokenizer_config.json` beside it; nothing is ever downloaded. It needs the `[text]` extra
(Hugging Face `tokenizers` and `jinja2`), imported only here.

What a server does, and this module does the same:

- chat (`/v1/chat/completions`): the messages (and tools) rendered with the chat template,
  `add_generation_prompt=True`, the named special tokens (bos_token, eos_token, ...) given to
  the template, then encoded with `add_special_tokens=False` (the template writes BOS where
  the model has one): vLLM's ChatCompletionRequest defaults, transformers' apply_chat_template;
- completion (`/v1/completions`): the prompt encoded with `add_special_tokens=True` (vLLM's
  CompletionRequest default), so tokenizer.json's post-processor adds BOS where it has one
  (as transformers' generic fast tokenizer: add_bos_token in tokenizer_config.json does not
  rebuild it, tests/fixtures/chat_reference_ids.json's "flags" model).

The template is rendered as transformers renders it (utils/chat_template_utils.py,
`_compile_jinja_template`): jinja2's ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks, the loopcontrols extension, `raise_exception`, a `tojson` that does not escape
HTML, `strftime_now`; messages with their None values dropped. A message whose content is a
list of parts has its text parts joined with newlines, as vLLM does for templates that read
content as a string.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from analyzer.errors import ConfigError

EXTRA_HINT = "pip install 'hybrid-prefix-analyzer[text]'"
# The named special tokens transformers gives every chat template (special_tokens_map).
SPECIAL_TOKEN_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


ENCODE_BATCH = 64


class TemplateRefused(ValueError):
    """The chat template could not render a request (its raise_exception, or an error)."""


@dataclass(frozen=True)
class ChatTokenizer:
    """A model's tokenizer and chat template, and their provenance for the sources table."""

    name: str  # the model folder's name (or the tokenizer.json's folder)
    tokenizer_sha256: str  # of tokenizer.json
    chat_template: str | None
    chat_template_sha256: str | None  # of the template's UTF-8 text
    backend: Any  # tokenizers.Tokenizer
    template: Any  # the compiled jinja2 Template, or None
    special_tokens: dict[str, str]

    def render(self, messages: list, tools: list | None, kwargs: dict | None = None) -> str:
        """The text the server's chat endpoint makes of `messages` (TemplateRefused)."""
        if self.template is None:
            raise TemplateRefused("the tokenizer has no chat template (tokenizer_config.json)")
        values = {**self.special_tokens, **(kwargs or {})}
        values.update(
            messages=[_message(m) for m in messages],
            tools=tools,
            documents=None,
            add_generation_prompt=True,
        )
        try:
            return self.template.render(**values)
        except Exception as exc:  # jinja2's TemplateError, or the template's own TypeError
            raise TemplateRefused(f"the chat template refused it: {exc}") from None

    def chat_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of rendered chats: no special tokens beyond those the template wrote."""
        return self._ids(texts, add_special_tokens=False)

    def prompt_ids(self, prompts: Sequence[str]) -> list[list[int]]:
        """Ids of completion prompts, with the tokenizer's special tokens (BOS)."""
        return self._ids(prompts, add_special_tokens=True)

    @property
    def _encode(self) -> Any:
        """encode_batch_fast (tokenizers >= 0.21: no offsets computed), else encode_batch."""
        return getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)

    def _ids(self, texts: Sequence[str], *, add_special_tokens: bool) -> list[list[int]]:
        """Encoded on the tokenizer's threads, ENCODE_BATCH texts at a time: an Encoding
        holds its tokens' strings and offsets too, ~100 bytes a token, so only the ids of
        each batch are kept (bench_ingest.py's chat row: 819 MiB at its peak when
        a whole 8 MiB chunk was encoded at once, 386 MiB in batches of 64)."""
        out: list[list[int]] = []
        for start in range(0, len(texts), ENCODE_BATCH):
            batch = list(texts[start : start + ENCODE_BATCH])
            encoded = self._encode(batch, add_special_tokens=add_special_tokens)
            out.extend(e.ids for e in encoded)
        return out


def _message(message: Any) -> Any:
    """A message as the template sees it: None values dropped (transformers), content parts
    joined (vLLM's string content format)."""
    if not isinstance(message, dict):
        raise TemplateRefused(f"a message is {type(message).__name__}, not an object")
    out = {k: v for k, v in message.items() if v is not None}
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = "\n".join(_part_text(part) for part in content)
    return out


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and part.get("type", "text") == "text" and "text" in part:
        return str(part["text"])
    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
    raise TemplateRefused(f"a content part of type {kind!r}: only text is tokenized here")


def load(path_text: str) -> ChatTokenizer:
    """The tokenizer at `path_text` (a model folder, or a tokenizer.json); ConfigError naming
    the path and why when it is not one, or when the [text] extra is missing."""
    modules = _modules()
    folder, tokenizer_json = _files(path_text)
    config = _config(folder / "tokenizer_config.json")
    template_text = _template_text(folder, config)
    try:
        backend = modules["tokenizers"].Tokenizer.from_file(str(tokenizer_json))
    except Exception as exc:
        raise ConfigError(
            f"--tokenizer {path_text}: {tokenizer_json} is not a tokenizers file ({exc})"
        ) from None
    template = None
    if template_text is not None:
        try:
            template = _compile(template_text, modules["jinja2"])
        except Exception as exc:
            raise ConfigError(
                f"--tokenizer {path_text}: the chat template does not parse ({exc})"
            ) from None
    return ChatTokenizer(
        name=folder.resolve().name,
        tokenizer_sha256=_sha256_file(tokenizer_json),
        chat_template=template_text,
        chat_template_sha256=None
        if template_text is None
        else hashlib.sha256(template_text.encode()).hexdigest(),
        backend=backend,
        template=template,
        special_tokens=_special_tokens(config),
    )


def _modules() -> dict[str, Any]:
    try:
        import jinja2
        import jinja2.ext
        import jinja2.nodes
        import jinja2.sandbox
        import tokenizers
    except ImportError as exc:
        raise ConfigError(
            f"--tokenizer needs the text extra ({exc.name} is not installed): {EXTRA_HINT}"
        ) from None
    return {"jinja2": jinja2, "tokenizers": tokenizers}


def _files(path_text: str) -> tuple[Path, Path]:
    """(folder, tokenizer.json) of a local path; never a name to download."""
    path = Path(path_text)
    if path.is_dir():
        folder, tokenizer_json = path, path / "tokenizer.json"
    elif path.is_file():
        folder, tokenizer_json = path.parent, path
        if path.name != "tokenizer.json":
            raise ConfigError(
                f"--tokenizer {path_text}: not a tokenizer.json (give the model folder, or its "
                "tokenizer.json with tokenizer_config.json beside it)"
            )
    else:
        raise ConfigError(
            f"--tokenizer {path_text}: no such folder or file (hpa never downloads a "
            "tokenizer: give a local model folder, e.g. one huggingface-cli download wrote)"
        )
    for needed in (tokenizer_json, folder / "tokenizer_config.json"):
        if not needed.is_file():
            raise ConfigError(
                f"--tokenizer {path_text}: {needed} is missing (a model folder holds "
                "tokenizer.json and tokenizer_config.json)"
            )
    return folder, tokenizer_json


def _config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--tokenizer: {path}: not readable JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"--tokenizer: {path}: not a JSON object")
    return config


def _template_text(folder: Path, config: dict[str, Any]) -> str | None:
    """The chat template: chat_template.jinja in the folder (as transformers saves it), else
    tokenizer_config.json's chat_template (a string, or named templates: "default")."""
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    found = config.get("chat_template")
    if isinstance(found, list):
        named = {t.get("name"): t.get("template") for t in found if isinstance(t, dict)}
        found = named.get("default")
    return found if isinstance(found, str) else None


def _special_tokens(config: dict[str, Any]) -> dict[str, str]:
    """The named special tokens of tokenizer_config.json, as strings (an AddedToken's
    serialised form is an object with its `content`)."""
    found = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            found[name] = value
    return found


def _compile(text: str, jinja2: Any) -> Any:
    """The template compiled as transformers compiles it (its sandbox, filters, globals)."""

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` (transformers' assistant-mask tag): the
        body as it is."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body).set_lineno(lineno)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(text)


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
