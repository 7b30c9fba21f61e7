"""A policy file's text as keys: JSON, TOML (`.toml`) or YAML (`.yaml`, `.yml`), one table
from suffix to parser. A file that does not parse is one line naming the file and the line
(`policy p.yaml:3: cannot read: ...`); a key given twice is refused in each format (TOML does
so itself; JSON and YAML would keep the last silently).

YAML is read with PyYAML's safe loader, less its date resolver: `2026-10-01` stays the text
it is (a policy holds no dates, and a date object is no JSON value). YAML 1.1's other scalars
apply (`null` and `~` are null, `yes`/`no` booleans).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analyzer.errors import ConfigError


class _Twice(ValueError):
    """A key given twice (`line`: 1-based where the format knows it)."""

    def __init__(self, key: str, line: int | None = None):
        super().__init__(key)
        self.key, self.line = key, line


class _Unreadable(ValueError):
    """Text its format does not parse: the parser's words, and the 1-based line if known."""

    def __init__(self, problem: str, line: int | None):
        super().__init__(problem)
        self.problem, self.line = problem, line


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Twice(key)
        out[key] = value
    return out


def _json(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_json_pairs)
    except json.JSONDecodeError as exc:
        raise _Unreadable(exc.msg, exc.lineno) from None


_TOML_AT = re.compile(r" \(at line (\d+), column \d+\)$")


def _toml(text: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        at = _TOML_AT.search(msg)
        raise _Unreadable(_TOML_AT.sub("", msg), int(at.group(1)) if at else None) from None


def _yaml(text: str) -> Any:
    import yaml  # imported only for a YAML file

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: set = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise _Twice(str(key), key_node.start_mark.line + 1)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    Loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 (a SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise _Unreadable(exc.problem or str(exc), mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise _Unreadable(str(exc), None) from None


# suffix -> (format's name, parser); any other suffix is read as JSON
FORMATS: dict[str, tuple[str, Callable[[str], Any]]] = {
    ".toml": ("TOML", _toml),
    ".yaml": ("YAML", _yaml),
    ".yml": ("YAML", _yaml),
}
JSON = ("JSON", _json)


def parse_policy_text(text: str, name: str, suffix: str = ".json") -> Any:
    """The value a policy file's `text` holds, parsed by its `suffix`'s format; `name` is
    what the errors call the file. Raises ConfigError, one line."""
    kind, parse = FORMATS.get(suffix.lower(), JSON)
    try:
        return parse(text)
    except _Twice as exc:
        where = name if exc.line is None else f"{name}:{exc.line}"
        raise ConfigError(f"policy {where}: key {exc.key!r} is given twice") from None
    except _Unreadable as exc:
        where = name if exc.line is None else f"{name}:{exc.line}"
        raise ConfigError(f"policy {where}: not valid {kind} ({exc.problem})") from None


def read_policy_file(path: Path) -> Any:
    """A policy file's parsed value (ConfigError: it cannot be read or parsed)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"policy {path}: cannot read ({reason})") from None
    return parse_policy_text(text, str(path), path.suffix)
