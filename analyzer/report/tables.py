"""Plain-text, CSV and JSON renderings of an Arrow table for the terminal."""

from __future__ import annotations

import csv
import io
import json
import math
from decimal import Decimal

import orjson
import pyarrow as pa

from analyzer.store.export import FORMULA_STARTS
from analyzer.words import shown

FORMATS = ("table", "csv", "json")

SIGNIFICANT = 3  # a float shows at least this many significant digits
MAX_DECIMALS = 12  # beyond, in exponent notation
PRECISE_SIGNIFICANT = 6  # `hpa query`: what the query returned, to this many at most


def _decimals(value: float) -> int:
    """Decimals that show `value` to a thousandth, or to SIGNIFICANT significant digits
    where that is finer (0.009726 -> 0.00973, 0.000123 -> 0.000123), trailing zeros
    dropped: one rule for every float."""
    if value == 0:
        return 0
    need = max(3, SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{min(need, MAX_DECIMALS)}f}".rstrip("0")
    return len(text) - text.index(".") - 1


def _precise_decimals(value: float) -> int:
    """Decimals that show `value` as returned (its shortest repr: round(x, 5) -> 5) up to
    PRECISE_SIGNIFICANT significant digits, and never fewer than `_decimals`."""
    if value == 0:
        return 0
    exact = -Decimal(repr(value)).as_tuple().exponent
    top = PRECISE_SIGNIFICANT - 1 - math.floor(math.log10(abs(value)))
    text = f"{value:.{max(0, min(exact, top, MAX_DECIMALS))}f}"
    shown = len(text.rstrip("0")) - text.index(".") - 1 if "." in text else 0
    return max(_decimals(value), shown)


def _cell(value, decimals: int | None = None, precise: bool = False) -> str:
    """One value as text; a float with `decimals` places (a column prints its floats with
    one number of places: the most any of them needs to a thousandth), or its own where it
    needs more (a value under 0.01) or has no column. `precise`: `_precise_decimals`."""
    if value is None:
        return ""
    if isinstance(value, Decimal) and value == value.to_integral_value():
        value = int(value)  # SUM over integers comes back as a DECIMAL
    if isinstance(value, float):
        if not math.isfinite(value) or (value and abs(value) < 10.0**-MAX_DECIMALS):
            return f"{value:.{SIGNIFICANT}g}"
        own = _precise_decimals(value) if precise else _decimals(value)
        shared = PRECISE_SIGNIFICANT if precise else 3
        return f"{value:,.{own if own > shared or decimals is None else decimals}f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, list | dict):
        text = orjson.dumps(value, default=str).decode()
        return text if len(text) <= 60 else text[:57] + "..."
    return shown(str(value))  # a trace field cannot drive the terminal


def _json_default(value):
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return str(value)


def _json_line(row: dict) -> str:
    """One row as compact JSON. orjson writes integers up to 64 bits; a wider one (a HUGEINT,
    `sum(hash(...))`) is written exactly by the standard library, with orjson's rule for
    NaN and infinities (null)."""
    try:
        return orjson.dumps(row, default=_json_default).decode()
    except TypeError:  # orjson.JSONEncodeError: "Integer exceeds 64-bit range"
        return json.dumps(
            _finite(row), default=_json_default, separators=(",", ":"), ensure_ascii=False,
            allow_nan=False,
        )  # fmt: skip


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def render(
    table: pa.Table,
    fmt: str = "table",
    *,
    spreadsheet_safe: bool = False,
    precise: bool = False,
) -> str:
    """`table` as aligned text for people (numbers right-aligned, control characters shown
    `\\x1b`, `words.shown`), or as data: CSV or JSON lines holding the stored text (JSON
    escapes controls as JSON does), the same bytes wherever they are printed.
    `spreadsheet_safe`: CSV text cells that start like a formula (= + - @, tab, carriage
    return) get a leading apostrophe.
    `precise` (`hpa query`): aligned floats show what was returned, up to
    PRECISE_SIGNIFICANT significant digits (round(x, 5) keeps its 5 decimals), not the
    thousandth the commands' own tables print."""
    if fmt == "json":
        return "".join(_json_line(row) + "\n" for row in table.to_pylist())
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(table.column_names)
        for row in table.to_pylist():
            writer.writerow([_csv_cell(v, spreadsheet_safe) for v in row.values()])
        return out.getvalue()
    return _aligned(table, precise)


def _csv_cell(value, spreadsheet_safe: bool):
    if value is None:
        return ""
    if not isinstance(value, str):
        return value
    if spreadsheet_safe and value.startswith(FORMULA_STARTS):
        value = "'" + value
    return value


def _places(values: list, precise: bool = False) -> int | None:
    """The decimals a column's floats share (None when it holds none)."""
    floats = [v for v in values if isinstance(v, float) and math.isfinite(v)]
    if precise:
        return (
            max(min(_precise_decimals(v), PRECISE_SIGNIFICANT) for v in floats) if floats else None
        )
    return max(min(_decimals(v), 3) for v in floats) if floats else None


def _aligned(table: pa.Table, precise: bool = False) -> str:
    names = [shown(name) for name in table.column_names]
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    places = [_places(values, precise) for values in columns]
    rows = [
        [_cell(v, p, precise) for v, p in zip(row, places, strict=True)]
        for row in zip(*columns, strict=True)
    ]
    numeric = [
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
        for t in table.schema.types
    ]
    widths = [max([len(n)] + [len(r[i]) for r in rows]) for i, n in enumerate(names)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if num else c.ljust(w)
            for c, w, num in zip(cells, widths, numeric, strict=True)
        ).rstrip()

    out = [line(names), line(["-" * w for w in widths])]
    out.extend(line(r) for r in rows)
    return "\n".join(out) + "\n"
