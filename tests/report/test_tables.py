"""report.tables: how `hpa query` and the CLI's tables print values. One rule for floats
(issue 33 item 5: 0.009726 printed as 0.01 beside 0.000123 in full): to a thousandth, or to
three significant digits where that is finer; a column's floats share their places."""

from __future__ import annotations

import pyarrow as pa
import pytest

from analyzer.report.tables import render


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.009726, "0.00973"),
        (0.000123, "0.000123"),
        (0.0000123456, "0.0000123"),
        (0.497, "0.497"),
        (0.5, "0.5"),
        (3830.9, "3,830.9"),
        (12345678.25, "12,345,678.25"),
        (2.0, "2"),
        (0.0, "0"),
        (-0.01680, "-0.0168"),
        (1e-15, "1e-15"),
        (float("nan"), "nan"),
    ],
)
def test_a_float_alone_shows_a_thousandth_or_three_significant_digits(value, shown):
    assert render(pa.table({"x": [value]})).splitlines()[2].strip() == shown


def test_a_column_shares_its_places_and_a_small_value_keeps_its_digits():
    text = render(pa.table({"x": [0.009726, 0.5, 0.000123, 2.0]}))
    assert text.splitlines()[2:] == [" 0.00973", "   0.500", "0.000123", "   2.000"]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        # (issue 47 item 11: round(x, 5) = 0.92649 printed as 0.926)
        (0.92649, "0.92649"),
        (0.926492, "0.926492"),
        (1 / 3, "0.333333"),
        (0.1 + 0.2, "0.3"),
        (100 / 3, "33.3333"),
        (0.000012345, "0.000012345"),
        (0.0000123456789, "0.0000123457"),
        (12345.678901, "12,345.679"),  # never fewer than the thousandth
        (0.5, "0.5"),
        (2.0, "2"),
        (0.0, "0"),
        (-0.0168, "-0.0168"),
        (1e-15, "1e-15"),
        (float("inf"), "inf"),
    ],
)
def test_hpa_query_shows_what_was_returned_to_six_significant_digits(value, shown):
    assert render(pa.table({"x": [value]}), precise=True).splitlines()[2].strip() == shown


def test_hpa_query_tells_close_values_apart_and_a_column_shares_its_places():
    text = render(pa.table({"x": [0.92649, 0.92651, 0.5, 2.0]}), precise=True)
    assert text.splitlines()[2:] == ["0.92649", "0.92651", "0.50000", "2.00000"]
