"""`hpa report`: the HTML report, with an incident section when two windows are given.

The incident is `hpa compare`'s comparison of two time windows of one run (the first
`--run`, else the latest run that is no sweep point), computed here and handed to the
report (the report layer draws; it does not attribute).
"""

from __future__ import annotations

import math
from pathlib import Path

from analyzer.errors import ConfigError
from analyzer.pipeline.compare import compare
from analyzer.report.html import ReportResult, render_report
from analyzer.store.db import DEFAULT_DB
from analyzer.store.export import check_out_folder


def write_report(
    out: str | Path,
    *,
    db_path: str | Path = DEFAULT_DB,
    runs: list[int] | None = None,
    window: str | None = None,
    baseline: str | None = None,
    bin_s: float | None = None,
    target: float | None = None,
) -> ReportResult:
    """Write the report of `runs` (default: every run that is no sweep point) to `out`;
    with `window` and `baseline` (START..END each, as `hpa compare`), an incident section
    comparing them in run `runs[0]` (default: the latest run that is no sweep point).
    `bin_s`: the time charts' window width in seconds (default: about 24 windows).
    `target`: a useful-hit ratio in (0, 1] for the capacity curves (the line, and each
    sweep's smallest pool reaching it).

    Raises:
        ConfigError: one window without the other, or a bad or empty window; what
            `render_report` and `compare` raise. InputFileError: `out`'s folder does not
            exist (checked first: no folder is made).
    """
    check_out_folder(out)
    if bin_s is not None and not (math.isfinite(bin_s) and bin_s > 0):
        raise ConfigError(f"--bin {bin_s}: expected seconds > 0")
    if target is not None and not 0.0 < target <= 1.0:
        raise ConfigError(f"--target {target}: expected a useful-hit ratio in (0, 1]")
    incident = None
    if window is not None or baseline is not None:
        if window is None or baseline is None:
            missing = "--baseline" if baseline is None else "--window"
            raise ConfigError(f"{missing} is missing: an incident compares two windows")
        incident = compare(
            db_path=db_path, window=window, baseline=baseline, runs=tuple(runs or ())[:1]
        )
    return render_report(db_path, out, runs=runs, incident=incident, bin_s=bin_s, target=target)
