"""The report's sections' prose (analyzer/report/sections.py)."""

from __future__ import annotations

import re

from analyzer.report.sections import windows_section


def test_the_windows_prose_writes_seconds_as_every_other_figure_does(report_data):
    """'one 300s window', '(window starting at 0s)': the report writes '1.955 s' elsewhere
    (a space before the unit)."""
    body, _ = windows_section(report_data)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))
    assert re.search(r"Each point covers one [\d,]+ s window", text)
    assert re.search(r"\(window starting at [\d,]+ s\) to [\d.]+% \(at [\d,]+ s\)\.", text)
