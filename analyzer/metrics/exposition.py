"""Reading saved Prometheus `/metrics` texts (exposition format 0.0.4, or OpenMetrics) for
`hpa validate`: counter samples of a few names, checked line by line.

Every sample line is parsed (name, optional `{label="value",...}`, value, optional
timestamp, optional OpenMetrics exemplar `# {...} v`), so a saved HTML error page or a
truncated line is a one-line error naming file and line, never a silently wrong count.
Comments (`# HELP`, `# TYPE`, `# EOF`) and blank lines are skipped. Only samples whose name
is in `wanted` are kept; `NAME` and `NAME_total` both count as the counter NAME.

    vllm:prefix_cache_hits_total{engine="0",model_name="qwen"} 1088.0
        -> Sample("vllm:prefix_cache_hits", (("engine", "0"), ("model_name", "qwen")), 1088, 12)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from analyzer.errors import InputFileError
from analyzer.metrics.prometheus import escape_label_value

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    """One counter sample: `name` without `_total`, labels sorted by name, value in tokens."""

    name: str
    labels: Labels
    value: int
    line_no: int


class _LineError(ValueError):
    pass


def read_counters(path: str | Path, wanted: frozenset[str]) -> list[Sample]:
    """The samples of counters named in `wanted` (bare names) in the file `path`.

    Raises:
        InputFileError: missing or unreadable file, a malformed line (`file:line: why`), a
            wanted counter whose value is not a whole number >= 0, or a sample seen twice.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such metrics file") from None
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    samples: list[Sample] = []
    seen: dict[tuple[str, Labels], int] = {}
    for line_no, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            name, labels, value = parse_sample_line(stripped)
        except _LineError as exc:
            raise InputFileError(f"{path}:{line_no}: {exc}") from None
        base = name.removesuffix("_total")
        if base not in wanted:
            continue
        if not (math.isfinite(value) and value >= 0 and value.is_integer()):
            raise InputFileError(
                f"{path}:{line_no}: {name}: counter value {value!r} is not a whole "
                "number of tokens >= 0"
            )
        key = (base, labels)
        if key in seen:
            raise InputFileError(
                f"{path}:{line_no}: {name}{format_labels(labels)} appears twice "
                f"(first at line {seen[key]})"
            )
        seen[key] = line_no
        samples.append(Sample(base, labels, int(value), line_no))
    return samples


def parse_sample_line(line: str) -> tuple[str, Labels, float]:
    """(metric name, sorted labels, value) of one sample line; raises _LineError."""
    match = _NAME.match(line)
    if match is None:
        raise _LineError(f"expected a metric name, got {line[:40]!r}")
    name, pos = match.group(), match.end()
    labels: Labels = ()
    if pos < len(line) and line[pos] == "{":
        labels, pos = _parse_labels(line, pos + 1)
    rest = line[pos:]
    if rest and not rest[0].isspace():
        raise _LineError(f"{name}: unexpected {rest[:20]!r} after the name")
    rest = rest.split(" # ", 1)[0]  # an OpenMetrics exemplar follows " # "
    parts = rest.split()
    if not 1 <= len(parts) <= 2:
        raise _LineError(f"{name}: expected a value and an optional timestamp")
    try:
        value = float(parts[0])
        if len(parts) == 2:
            float(parts[1])
    except ValueError:
        raise _LineError(f"{name}: {' '.join(parts)!r} is not a number") from None
    return name, tuple(sorted(labels)), value


def _parse_labels(line: str, pos: int) -> tuple[Labels, int]:
    """Labels from just after `{` to the matching `}`; returns them and the position after."""
    labels: list[tuple[str, str]] = []
    while True:
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if pos < len(line) and line[pos] == "}":
            return tuple(labels), pos + 1
        match = _LABEL.match(line, pos)
        if match is None or line[match.end() : match.end() + 2] != '="':
            raise _LineError(f'bad label at column {pos + 1}: expected name="value"')
        value, pos = _parse_quoted(line, match.end() + 2)
        if any(k == match.group() for k, _ in labels):
            raise _LineError(f"label {match.group()!r} given twice")
        labels.append((match.group(), value))
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if pos < len(line) and line[pos] == ",":
            pos += 1
        elif pos >= len(line) or line[pos] != "}":
            raise _LineError(f"expected ',' or '}}' at column {pos + 1}")


def _parse_quoted(line: str, pos: int) -> tuple[str, int]:
    out: list[str] = []
    while pos < len(line):
        ch = line[pos]
        if ch == '"':
            return "".join(out), pos + 1
        if ch == "\\":
            nxt = line[pos + 1 : pos + 2]
            if nxt not in _ESCAPES:
                raise _LineError(f"bad escape '\\{nxt}' at column {pos + 1}")
            out.append(_ESCAPES[nxt])
            pos += 2
            continue
        out.append(ch)
        pos += 1
    raise _LineError("unterminated label value")


def format_labels(labels: Labels) -> str:
    """`{k="v",...}` as in the exposition text (empty when there are no labels)."""
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels) + "}"
