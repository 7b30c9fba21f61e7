"""Legibility of every figure as Chromium draws it (issue 15): the plot area (the plotting
rectangles of the rendered SVG) is at least 40% of each figure, no figure draws more than
8 series by default, the summary comes first and names the largest cause, and
`--window/--baseline` adds the incident section. On a token-id database with several
engines and on a hash-id (Mooncake) database. Screenshots of each section are saved.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from analyzer.pipeline.match import match_prefixes
from analyzer.pipeline.replay import run_replay
from analyzer.pipeline.report import write_report
from analyzer.pipeline.sweep import run_sweeps
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from tests.report import test_browser
from tests.report.conftest import MODEL

pytestmark = pytest.mark.skipif(not test_browser.CHROMIUM.exists(), reason="no /usr/bin/chromium")
MIN_PLOT_SHARE = 0.40
MAX_SERIES = 8
MOONCAKE = Path(__file__).parents[1] / "fixtures" / "external" / "mooncake"
SECTIONS = ("summary", "incident", "runs", "waterfall", "groups", "windows", "sweeps")


@pytest.fixture(scope="module")
def reports(report_db, tmp_path_factory) -> dict[str, Path]:
    """A token-id report (the report database, 4 engines and a sweep, an incident) and a
    hash-id one (Mooncake's fixture, 2 policies)."""
    import shutil

    folder = tmp_path_factory.mktemp("legible")
    db = folder / "tokens.duckdb"
    shutil.copyfile(report_db, db)
    for engine in ("sglang", "marconi", "oracle"):
        run_replay(make_policy({"model": MODEL, "engine": engine}), db_path=db)
    run_sweeps("vllm-default", [f"model={MODEL}"], ["num_blocks=200,800"], db_path=db, jobs=1)
    hashed = folder / "hash.duckdb"
    ingest([MOONCAKE], db_path=hashed)
    match_prefixes(hashed, backend="numpy")
    run_replay(make_policy({"model": MODEL}), db_path=hashed)
    run_replay(make_policy({"model": MODEL, "retention_interval": None}), db_path=hashed)
    out = {
        "tokens": write_report(folder / "tokens.html", db_path=db).path,
        "incident": write_report(
            folder / "incident.html", db_path=db, window="300..", baseline="..300"
        ).path,
        "hash": write_report(folder / "hash.html", db_path=hashed).path,
    }
    return out


def plot_shares(dom: str) -> dict[str, float]:
    """Per figure id: the plotting rectangles' area over the figure's SVG area."""
    out = {}
    starts = [(m.start(), m.group(1)) for m in re.finditer(r'<div[^>]*id="(fig-[^"]+)"', dom)]
    for k, (start, fid) in enumerate(starts):
        div = dom[start : starts[k + 1][0] if k + 1 < len(starts) else len(dom)]
        svg = re.search(r'<svg class="main-svg"[^>]*width="([\d.]+)" height="([\d.]+)"', div)
        assert svg, f"{fid}: no plot svg"
        area = sum(
            float(re.search(r'width="([\d.]+)"', r).group(1))
            * float(re.search(r'height="([\d.]+)"', r).group(1))
            for r in re.findall(r'<rect class="nsewdrag drag"[^>]*>', div)
        )
        out[fid] = area / (float(svg.group(1)) * float(svg.group(2)))
    return out


def drawn_series(page: str) -> dict[str, int]:
    """Per figure id: the series drawn when the page opens (traces not hidden, one per
    legend group: a run's two panels are one series)."""
    out = {}
    decoder = json.JSONDecoder()
    for m in re.finditer(r'Plotly\.newPlot\(\s*"(fig-[^"]+)",\s*', page):
        traces, _ = decoder.raw_decode(page, m.end())
        shown = {
            t.get("legendgroup") or t.get("name") or str(i)
            for i, t in enumerate(traces)
            if t.get("visible", True) is True
        }
        out[m.group(1)] = len(shown)
    return out


@pytest.mark.parametrize("which", ["tokens", "incident", "hash"])
def test_every_figure_is_mostly_plot_and_draws_few_series(reports, which, tmp_path):
    url = reports[which].resolve().as_uri()
    run = test_browser._chromium(tmp_path, "--window-size=1300,2000", "--dump-dom", url)
    assert run.returncode == 0, run.stderr[-2000:]
    shares = plot_shares(run.stdout)
    assert len(shares) >= 8
    small = {fid: round(s, 3) for fid, s in shares.items() if s < MIN_PLOT_SHARE}
    assert not small, f"plot area below {MIN_PLOT_SHARE:.0%} of the figure: {small}"
    many = {f: n for f, n in drawn_series(reports[which].read_text()).items() if n > MAX_SERIES}
    assert not many, f"more than {MAX_SERIES} series drawn by default: {many}"


def test_the_summary_and_incident_sections(reports):
    page = reports["incident"].read_text(encoding="utf-8")
    order = [page.index(f'<section id="{s}">') for s in ("summary", "incident", "runs")]
    assert order == sorted(order)
    summary = page[order[0] : order[1]]
    assert "Its largest loss is match granularity" in summary
    assert "Incident: the window against the baseline" in page
    assert 'id="fig-incident"' in page
    assert 'id="incident"' not in reports["tokens"].read_text(encoding="utf-8")
    hashed = html.unescape(reports["hash"].read_text(encoding="utf-8"))
    assert "matched whole 512-token trace blocks: 1,024-token blocks, not the preset's 544" in (
        hashed
    )


def test_the_incident_leads_the_summary_and_shows_what_moved(reports):
    """(issue 33 items 1-4: the verdict was on the headline run above an incident on another
    run; the two waterfalls spanned 0-100%, so a 0.4-point move was invisible; the time chart
    did not mark the windows; the sentence named no lever)"""
    page = html.unescape(reports["incident"].read_text(encoding="utf-8"))
    summary = page[page.index('<section id="summary">') : page.index('<section id="incident">')]
    first = re.sub(r"<[^>]+>", "", summary.split("<li>")[1])
    run = re.search(
        r"Incident \(run (\d+), window 300\.\. s, [\d,]+ requests, against \.\.300 s,", first
    )
    assert run, first
    assert re.search(rf"<li>Run {run[1]} · \w+ reused", summary)  # the verdict: the same run
    assert "; the lever: " in summary or "no setting recovers it" in summary
    assert 'id="fig-incident-change"' in page  # the change per cause, beside the levels
    at = re.search(r'Plotly\.newPlot\(\s*"fig-windows"', page).start()
    windows = page[at : page.index("</script>", at)]
    assert '"text":"incident"' in windows and '"text":"baseline"' in windows


def test_what_this_means_speaks_of_the_incidents_run(reports):
    """(issue 47 item 3: "In run 1 · vllm ...", "The largest loss in the first run ..."
    below an incident on another run) every section's text names the incident's run."""
    page = html.unescape(reports["incident"].read_text(encoding="utf-8"))
    incident = re.search(r"Incident \(run (\d+), window", re.sub(r"<[^>]+>", "", page))[1]
    texts = [
        re.sub(r"<[^>]+>", "", m)
        for m in re.findall(r'<p class="meaning">(.*?)</p>', page, flags=re.S)
    ]
    named = [n for t in texts for n in re.findall(r"\b[Ii]n run (\d+) ·", t)]
    assert len(named) >= 4, texts  # the waterfall, groups, time chart, weighting, junctions
    assert set(named) == {incident}, texts
    assert not any("In the first run" in t or "in the first run" in t for t in texts)
    # the figures with a run menu open on that run, listed first
    for fid in ("fig-waterfall-groups-tokens", "fig-junctions"):
        at = re.search(rf'Plotly\.newPlot\(\s*"{fid}"', page).start()
        menu = re.findall(r'"label":"(run \d+) ·', page[at : page.index("</script>", at)])
        assert menu[0] == f"run {incident}", (fid, menu)


def test_screenshots_of_each_section(reports, tmp_path):
    """One screenshot per section (the others hidden by one CSS rule), for a person to
    look at: the test prints where they are."""
    for which in ("incident", "hash"):
        page = reports[which].read_text(encoding="utf-8")
        for section in SECTIONS:
            if f'<section id="{section}">' not in page:
                continue
            alone = tmp_path / f"{which}-{section}.html"
            rule = f"section:not(#{section}){{display:none}}"
            alone.write_text(page.replace("</style>", rule + "</style>", 1), encoding="utf-8")
            shot = tmp_path / f"{which}-{section}.png"
            run = test_browser._chromium(
                tmp_path, "--window-size=1300,1400", f"--screenshot={shot}", alone.as_uri()
            )
            assert run.returncode == 0, run.stderr[-2000:]
            assert shot.stat().st_size > 20_000, f"{shot} looks blank"
    print(f"screenshots: {tmp_path}")
