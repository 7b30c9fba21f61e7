"""`hpa match` through the CLI: output, exports, and one-line errors with exit codes."""

from __future__ import annotations

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.prefixes.memory import Request
from analyzer.store.db import connect
from tests.prefixes.helpers import store

REQUESTS = [
    Request("a", prompt=(1, 2, 3, 4), output=(5, 6), conversation_id="c1", replica="r1"),
    Request("b", prompt=(1, 2, 3, 4, 5, 6, 7), conversation_id="c1", replica="r2"),
    Request("c", prompt=(1, 2, 9), output=(1,), replica="r1"),
    Request("d", prompt=(1, 2, 3, 8), conversation_id="c2", replica="r1"),
]


def _run(*args):
    return CliRunner().invoke(cli, ["match", *args])


def test_match_writes_tables_and_prints_a_summary(tmp_path):
    db = store(tmp_path / "t.duckdb", REQUESTS)
    result = _run("--db", str(db), "--backend", "numpy")
    assert result.exit_code == 0, result.output
    assert "matched 4 requests (18 prompt tokens)" in result.output
    assert "on numpy" in result.output and "junctions: 2;" in result.output
    rows = (
        duckdb.connect(str(db))
        .execute("SELECT * FROM prefix_matches ORDER BY arrival_seq")
        .fetchall()
    )
    assert rows == [
        ("a", 0, 4, 0, None, 0, 0),
        ("b", 1, 7, 6, "a", 0, 6),  # r2 has nothing earlier
        ("c", 2, 3, 2, "a", 2, None),
        ("d", 3, 4, 3, "a", 3, 0),
    ]


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".csv"])
def test_out_exports_prefix_matches(tmp_path, suffix):
    db = store(tmp_path / "t.duckdb", REQUESTS)
    out = tmp_path / f"pm{suffix}"
    assert _run("--db", str(db), "--out", str(out)).exit_code == 0
    read = {".parquet": pl.read_parquet, ".jsonl": pl.read_ndjson, ".csv": pl.read_csv}[suffix]
    frame = read(out)
    assert frame["request_id"].to_list() == ["a", "b", "c", "d"]
    assert frame["shared_any_tokens"].to_list() == [0, 6, 2, 3]
    assert frame["shared_conversation_tokens"].to_list() == [0, 6, None, 0]


def test_runs_are_deterministic(tmp_path):
    db = store(tmp_path / "t.duckdb", REQUESTS)
    outs = []
    for k in range(2):
        out = tmp_path / f"run{k}.csv"
        assert _run("--db", str(db), "--out", str(out), "--derive-families").exit_code == 0
        con = duckdb.connect(str(db))
        junctions = con.execute("SELECT * FROM junctions").fetchall()
        con.close()
        outs.append((out.read_bytes(), junctions))
    assert outs[0] == outs[1]


def test_chunk_size_never_changes_the_tables(tmp_path):
    tables = []
    for chunk in ("1", "7", "1000000"):
        db = store(
            tmp_path / f"c{chunk}.duckdb",
            REQUESTS * 1
            + [Request(f"x{i}", prompt=(1, 2, 3, i % 3, 4), output=(i % 2,)) for i in range(9)],
        )
        assert _run("--db", str(db), "--chunk-tokens", chunk).exit_code == 0
        con = duckdb.connect(str(db))
        tables.append(
            (
                con.execute("SELECT * FROM prefix_matches").fetchall(),
                con.execute("SELECT * FROM junctions").fetchall(),
            )
        )
        con.close()
    assert tables[0] == tables[1] == tables[2]


def test_no_database_is_a_one_line_error(tmp_path):
    result = _run("--db", str(tmp_path / "none.duckdb"))
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: {tmp_path / 'none.duckdb'}: no such database; "
        f"run `hpa ingest FILE --db {tmp_path / 'none.duckdb'}` first"
    ]


def test_database_without_requests_is_a_one_line_error(tmp_path):
    db = tmp_path / "empty.duckdb"
    connect(db).close()
    result = _run("--db", str(db))
    assert result.exit_code == 1
    assert result.output == "Error: the database has no requests; run `hpa ingest FILE` first\n"


def test_unknown_out_suffix_is_a_config_error(tmp_path):
    db = store(tmp_path / "t.duckdb", REQUESTS)
    result = _run("--db", str(db), "--out", str(tmp_path / "x.txt"))
    assert result.exit_code == 2
    assert "x.txt: unknown format '.txt'; use one of .parquet, .jsonl, .csv" in result.output


def test_cupy_demanded_without_it(tmp_path, monkeypatch):
    import analyzer.prefixes.backend as backend
    from analyzer.errors import BackendUnavailable

    def unavailable():
        raise backend._Unavailable("cannot import cupy (ImportError: no cupy)")

    monkeypatch.setattr(backend, "_cupy_namespace", unavailable)
    db = store(tmp_path / "t.duckdb", REQUESTS)
    result = _run("--db", str(db), "--backend", "cupy")
    assert result.exit_code == BackendUnavailable.exit_code == 2
    assert result.output.startswith("Error: CuPy requested but not usable: cannot import cupy")


def test_help_documents_the_family_rule():
    result = CliRunner().invoke(cli, ["match", "--help"])
    assert result.exit_code == 0
    assert "--derive-families" in result.output and "derived:first_junction" in result.output


def test_one_derived_family_says_how_to_split_it_and_labels_can_be_undone(tmp_path):
    """(issue 14, item 10: Mooncake gave one derived family and no hint; labels stuck)"""
    from tests.conftest import write_jsonl

    system = list(range(1, 101))  # every prompt starts with it, then one of two tasks
    records = [
        {
            "request_id": f"r{i}",
            "prompt_token_ids": system + [1000 * (1 + i % 2) + k for k in range(100)] + [5000 + i],
        }
        for i in range(8)
    ]
    db = tmp_path / "f.duckdb"
    run = lambda *args: CliRunner().invoke(cli, list(args))  # noqa: E731
    assert (
        run("ingest", str(write_jsonl(tmp_path / "f.jsonl", records)), "--db", str(db)).exit_code
        == 0
    )
    out = run("match", "--db", str(db), "--derive-families")
    assert out.exit_code == 0, out.output
    assert "note: j100-" in out.output and "labels 8 of the 8 requests" in out.output
    assert "--min-family-tokens 101 labels them by the next junction" in out.output
    split = run("match", "--db", str(db), "--derive-families", "--min-family-tokens", "101")
    assert "derived prompt families: 2 labels on 8 requests" in split.output
    assert "note: " not in split.output
    cleared = run("match", "--db", str(db), "--clear-derived-families")
    assert "removed the prompt families an earlier --derive-families wrote" in cleared.output
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(prompt_family) FROM requests").fetchone() == (0,)
        tables = con.execute("SELECT table_name FROM derived_tables ORDER BY 1").fetchall()
    finally:
        con.close()
    assert ("requests.prompt_family",) not in tables


@pytest.mark.parametrize(
    ("threshold", "built", "said"),
    [
        # (issue 47 item 18: `radix trees: C (built)`, then `... tokens/s on numpy` for a
        # match that ran on them)
        (1, True, "on the C radix trees"),
        (1 << 20, True, "on numpy (a trace under 1,048,576 units skips the C radix trees)"),
        (1, False, "on numpy"),
    ],
)
def test_the_summary_names_the_path_the_match_took(tmp_path, monkeypatch, threshold, built, said):
    import analyzer.pipeline.match as match_module
    import analyzer.prefixes.engine as engine
    from analyzer.pipeline.match import match_prefixes
    from analyzer.prefixes.engine import MatchOptions

    monkeypatch.setattr(engine, "available", lambda: built)
    monkeypatch.setattr(match_module, "radix_available", lambda: built)
    db = store(tmp_path / "t.duckdb", REQUESTS)
    summary = match_prefixes(db, options=MatchOptions(compiled_min_units=threshold))
    assert summary.lines()[0].endswith(f" tokens/s {said}")
