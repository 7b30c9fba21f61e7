"""The report opened in real headless Chromium: every figure drawn, no script errors.

Skipped when /usr/bin/chromium is absent (.ci/run installs Debian's chromium).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from analyzer.report.html import FIGURE_IDS

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--virtual-time-budget=10000",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # no network: the page must be self-contained
)

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium")


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run(
        [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _figure_div(dom: str, fid: str) -> tuple[str, str]:
    """The rendered figure div's opening tag, and the DOM from there to the next figure."""
    start = dom.rindex("<div", 0, dom.index(f'id="{fid}"'))
    end = dom.find('class="plotly-graph-div', dom.index(">", start))
    return dom[start : dom.index(">", start)], dom[start : end if end > 0 else len(dom)]


def test_report_renders_in_chromium(report_html, tmp_path):
    url = report_html.path.resolve().as_uri()
    run = _chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", url)
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    for fid in FIGURE_IDS:
        opening, div = _figure_div(dom, fid)
        assert "js-plotly-plot" in opening, f"{fid} was not drawn by plotly.js"
        assert 'class="main-svg"' in div, f"{fid} has no plot svg"
    collector = re.search(r'<div id="hpa-errors" data-count="(\d+)">([^<]*)</div>', dom)
    assert collector, "the error collector did not run"
    assert collector.group(1) == "0", collector.group(2)
    console = [
        line
        for line in run.stderr.splitlines()
        if "Uncaught" in line or ("CONSOLE" in line and "error" in line.lower())
    ]
    assert not console, console

    shot = tmp_path / "shot.png"
    run = _chromium(tmp_path, "--window-size=1400,3000", f"--screenshot={shot}", url)
    assert run.returncode == 0, run.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 50_000  # a drawn page, not a blank one
    print(f"screenshot: {shot}")
