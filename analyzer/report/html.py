"""`hpa report`: one self-contained HTML file (plotly.js inlined once, no network).

Same database and runs -> identical bytes: fixed figure ids, no timestamps, sorted
frames, ratios rounded before they are written.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from plotly.offline import get_plotlyjs

from analyzer.report import load, routing
from analyzer.report.data import ReportData, load_report_data
from analyzer.report.host_tier import host_section
from analyzer.report.incident import incident_section
from analyzer.report.sections import (
    config_section,
    engines_section,
    junctions_section,
    policy_section,
    runs_section,
    sweep_section,
    weighting_section,
    windows_section,
)
from analyzer.report.summary import summary_section
from analyzer.report.validation import validation_section
from analyzer.report.waterfall_sections import groups_section, waterfall_runs_section
from analyzer.store.export import write_atomic

# Figure ids in page order (the load figure, after fig-windows, only when a run is
# concurrent; the routing figure only when a run has several replicas, as the mixed
# sample's runs have; the engine figure only with several engines; the sweep figure only
# when sweep_points exists).
FIGURE_IDS = (
    "fig-waterfall-runs-tokens",
    "fig-waterfall-runs-shares",
    "fig-waterfall-groups-tokens",
    "fig-waterfall-groups-shares",
    "fig-windows",
    "fig-routing",
    "fig-junctions",
    "fig-policy-compare",
    "fig-weighting",
)


@dataclass(frozen=True)
class ReportResult:
    path: Path
    figure_ids: tuple[str, ...]
    run_ids: tuple[int, ...]
    num_bytes: int


def render_report(
    db_path: str | Path,
    out: str | Path,
    runs: list[int] | None = None,
    incident: Any | None = None,
    bin_s: float | None = None,
    target: float | None = None,
) -> ReportResult:
    """Write the HTML report of `runs` (default: every replay run that is no sweep point)
    in `db_path` to `out`. `incident`: `hpa compare`'s comparison of two windows
    (analyzer.metrics.compare.Comparison), shown right after the summary. `bin_s`: the
    time windows' width in seconds (default: about 24 windows over the trace). `target`: a
    useful-hit ratio drawn on the capacity curves, each sweep's smallest pool reaching it
    marked.

    Raises:
        StoreError: no database or no replay runs. ConfigError: an unknown run id.
    """
    data = replace(load_report_data(db_path, runs, bin_s), target=target, incident=incident)
    if incident is not None and incident.current.run_id in data.runs["run_id"].to_list():
        data = replace(data, headline_run=incident.current.run_id)  # the summary leads with it
    page, ids = build_html(data, title_db=Path(db_path).name)
    encoded = page.encode("utf-8")
    out = write_atomic(out, encoded, option="--out")
    return ReportResult(out, ids, tuple(data.runs["run_id"].to_list()), len(encoded))


STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;
background:#fafafa}
main{max-width:1280px;margin:0 auto;padding:16px 24px 48px}
h1{margin:8px 0 4px}h2{margin-top:36px;border-bottom:2px solid #ddd;padding-bottom:4px}
section{background:#fff;padding:4px 16px 16px;margin:16px 0;border-radius:6px;
box-shadow:0 1px 3px rgba(0,0,0,.08)}
nav a{margin-right:14px}
p.meaning{background:#f3f6fa;border-left:4px solid #1f77b4;padding:8px 12px;max-width:75em}
p.notice{background:#fff5d6;border-left:4px solid #d9a400;padding:8px 12px;max-width:75em}
#summary ul{max-width:75em;line-height:1.5}#summary li{margin:4px 0}
ul.caveats{color:#555;font-size:14px}p.caveats{margin-bottom:0}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td{overflow-wrap:anywhere}main li,main p{overflow-wrap:anywhere}
thead th{background:#f0f0f0;position:sticky;top:0}
tr.differs{background:#fff5d6}
pre{background:#f6f6f6;padding:8px;font-size:12px;overflow-x:auto}
#hpa-errors{color:#b00;white-space:pre-wrap}#hpa-errors:empty{display:none}
"""

# Collects script errors into #hpa-errors so that a broken figure is visible on the page
# (and to the headless-browser test) instead of silently missing.
ERROR_COLLECTOR = """
window.hpaErrors=[];
window.addEventListener('error',function(e){window.hpaErrors.push(String(e.message));});
(function(){var ce=console.error;console.error=function(){
window.hpaErrors.push(Array.prototype.map.call(arguments,String).join(' '));
return ce.apply(console,arguments);};})();
window.addEventListener('load',function(){var d=document.getElementById('hpa-errors');
d.setAttribute('data-count',String(window.hpaErrors.length));
d.textContent=window.hpaErrors.join('\\n');});
"""


Section = Callable[[ReportData], tuple[str, list[str]]]


def _plain(build: Callable[[ReportData], str]) -> Section:
    """A builder of a section that is always there and draws no figure."""
    return lambda data: (build(data), [])


# The page's sections in order: (anchor, navigation label, builder). A builder returns its
# HTML and figure ids, or "" where the report has nothing for it (then it has no link).
SECTIONS: tuple[tuple[str, str, Section], ...] = (
    ("summary", "Summary", _plain(summary_section)),
    ("incident", "Incident", lambda data: incident_section(data.incident)),
    ("runs", "Runs", _plain(runs_section)),
    ("waterfall", "Waterfall", waterfall_runs_section),
    ("groups", "Families × revisions", groups_section),
    ("windows", "Over time", windows_section),
    ("load", "Load", load.load_section),
    ("host", "Host tier", host_section),
    ("routing", "Routing", routing.routing_section),
    ("junctions", "Junctions", junctions_section),
    ("policies", "Policies", policy_section),
    ("engines", "Engines", engines_section),
    ("weighting", "Request vs token", weighting_section),
    ("sweeps", "Sweeps", sweep_section),
    ("validation", "Validation", validation_section),
    ("config", "Configuration", _plain(config_section)),
)


def build_html(data: ReportData, *, title_db: str) -> tuple[str, tuple[str, ...]]:
    """The whole page, and the ids of the figures on it in page order."""
    sections, ids, nav = [], [], []
    for anchor, label, build in SECTIONS:
        body, got = build(data)
        if body:
            sections.append(body)
            ids.extend(got)
            nav.append((anchor, label))
    runs = ", ".join(str(i) for i in data.runs["run_id"].to_list())
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>hpa report: {html.escape(title_db)}</title>"
        f"<style>{STYLE}</style><script>{ERROR_COLLECTOR}</script>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head><body><main>'
        "<h1>Hybrid prefix-cache report</h1>"
        f"<p>Database <code>{html.escape(title_db)}</code>, replay runs {runs}. "
        "All figures are in prompt tokens unless a ratio is shown; hover any bar or point "
        "for exact counts. Made by <code>hpa report</code>; opens offline.</p>"
        '<div id="hpa-errors"></div><nav>'
        + "".join(f'<a href="#{a}">{html.escape(t)}</a>' for a, t in nav)
        + "</nav>"
        + "".join(sections)
        + "</main></body></html>\n"
    )
    return page, tuple(ids)
