"""`hpa demo` runs every stage on the bundled samples and prints the worked examples."""

from __future__ import annotations

import re

from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.pipeline import demo


def test_demo_end_to_end(tmp_path, monkeypatch):
    """Outside a clone (no sample_traces/ here, above, or beside the package) the demo
    synthesizes its samples into OUT/samples (the bundled bytes, tests/test_samples.py)."""
    monkeypatch.setattr(demo, "find_samples", lambda start=None: None)
    out = tmp_path / "demo"
    result = CliRunner().invoke(cli, ["demo", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "samples" / "mixed.jsonl.gz").is_file()
    assert "read 2,500 = stored 2,500 + rejected 0" in result.stdout
    assert "match: junctions:" in result.stdout
    assert "diagnostic_1088.jsonl           544             3       1,088" in result.stdout
    assert "0/0, 0/1088, 1088/0" in result.stdout
    assert (out / "demo.duckdb").is_file()
    assert "capacity sweeps: " in result.stdout
    assert result.stdout.endswith(f"report: {out / 'report.html'}\n")
    html = (out / "report.html").read_text()
    assert 'id="fig-sweeps"' in html and '<script src="http' not in html
    assert 'id="fig-engines"' in html  # several engines: the comparison section is shown
    for policy in ("vllm default", "retention null", "eagle drop", "round robin x2", "marconi"):
        assert policy in result.stdout
    assert "replay_tokens" in result.stdout
    # the policy table is the whole waterfall: per policy, hits and causes add up
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("policy  "))
    header = re.split(r"\s{2,}", lines[at])
    for line in lines[at + 2 : at + 2 + len(demo.POLICIES)]:
        row = dict(zip(header, re.split(r"\s{2,}", line), strict=True))
        tokens = {k: int(v.replace(",", "")) for k, v in row.items() if k.endswith("_tokens")}
        parts = [v for k, v in tokens.items() if k.startswith("lost_") or k in PARTS]
        assert sum(parts) == tokens["prompt_tokens"], row["policy"]


PARTS = ("hit_tokens", "unshared_tokens", "sparse_retention_miss_tokens")


def test_samples_are_found_from_any_folder_of_a_clone_install(tmp_path, monkeypatch):
    here = demo.find_samples()
    monkeypatch.chdir(tmp_path)  # no sample_traces/ here or above: the package's clone's
    assert demo.find_samples() == here and (here / demo.MAIN_TRACE).is_file()


def test_a_folder_holding_other_files_is_refused_and_kept(tmp_path):
    """The demo replaces its folder: `--out .` or a folder of the user's would lose their
    files, so one holding anything a demo does not write is refused, untouched."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "report.html").write_text("an earlier demo's")
    result = CliRunner().invoke(cli, ["demo", "--out", str(out)])
    assert (result.exit_code, result.output) == (
        2,
        f"Error: --out {out}: holds notes.txt, which no demo wrote; the demo replaces its "
        "folder, so give it a new or empty one, or an earlier demo's\n",
    )
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "report.html"]


def test_a_folder_a_killed_demo_left_is_an_earlier_demos(tmp_path):
    """A demo killed while it wrote its report left the report's temporary file (a short
    name of its own, `traces.io.scratch_file`): still a demo's folder, replaced."""
    out = tmp_path / "demo"
    out.mkdir()
    (out / "demo.duckdb").write_text("")
    (out / ".hpa-0123456789ab.tmp").write_text("<html")
    assert demo._fresh_out(out) == out
    assert [p.name for p in out.iterdir()] == ["cases"]


def test_a_folder_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "f.txt").write_text("")
    out = tmp_path / "f.txt" / "demo"
    result = CliRunner().invoke(cli, ["demo", "--out", str(out)])
    assert (result.exit_code, result.output) == (
        2,
        f"Error: --out {out}: cannot make it (Not a directory)\n",
    )


def test_a_demo_that_fails_midway_leaves_no_folder(tmp_path, monkeypatch):
    """(a Ctrl-C or an error after the ingest left a demo folder with a store and no report)"""
    import pytest

    from analyzer.errors import StoreError

    def broken(db_path, *args, **kwargs):
        raise StoreError(f"{db_path}: could not be written")

    monkeypatch.setattr(demo, "match_prefixes", broken)
    out = tmp_path / "demo"
    with pytest.raises(StoreError):
        demo.run_demo(out)
    assert not out.exists()
