"""`hpa validate`: a replay run against engine-observed cached tokens and /metrics deltas.

The database: two families of the seed diagnostic (3 x 2,176 tokens sharing 1,088, B=544,
vLLM defaults), family fa on revision r1 at t=0,1,2 and fb on r2 at t=3,4,5. The replay
predicts hits 0, 0, 1,088 and sparse-retention misses 0, 1,088, 0 in each family, so run 1
totals 13,056 queried, 2,176 hit, 2,176 sparse misses. Expected errors are computed by hand.
"""

from __future__ import annotations

import csv
import math

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import InputFileError
from analyzer.metrics.exposition import parse_sample_line, read_counters
from analyzer.metrics.validate import ALL, CACHED, counter_deltas
from analyzer.pipeline.replay import run_replay
from analyzer.pipeline.validate import validate
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from tests.conftest import db_rows, write_jsonl

B = 544
FAMILIES = (("fa", "r1", 1000), ("fb", "r2", 5000))  # family, revision, first token id


def records(cached: list[int | None]) -> list[dict]:
    """Six requests (fa x 3, fb x 3), the i-th with cached_tokens cached[i] (None = absent)."""
    out = []
    for f, (family, revision, first) in enumerate(FAMILIES):
        prefix = list(range(first, first + 2 * B))
        for j in range(3):
            i = 3 * f + j
            suffix = list(range(20000 + 3000 * i, 20000 + 3000 * i + 2 * B))
            rec = {
                "request_id": f"{family}-{j}",
                "timestamp": i,
                "prompt_family": family,
                "model_revision": revision,
                "prompt_token_ids": prefix + suffix,
            }
            if cached[i] is not None:
                rec["cached_tokens"] = cached[i]
            out.append(rec)
    return out


def build_db(tmp_path, cached: list[int | None], replay: bool = True):
    db = tmp_path / "v.duckdb"
    ingest([write_jsonl(tmp_path / "trace.jsonl", records(cached))], db_path=db)
    if replay:
        run_replay(make_policy({"block_size": B}), db_path=db)
    return db


def metrics_file(path, counters: dict[str, dict[str, int]], extra: str = ""):
    """A /metrics text: {counter name: {label text: value}}, with HELP/TYPE lines."""
    lines = []
    for name, samples in counters.items():
        lines += [f"# HELP {name}_total Some help.", f"# TYPE {name}_total counter"]
        lines += [f"{name}_total{{{labels}}} {float(v)}" for labels, v in samples.items()]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


Q, H, S = (
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:prefix_cache_sparse_retention_misses",
)
COLS = (
    "requests",
    "not_observed_requests",
    "observed_tokens",
    "predicted_tokens",
    "error_tokens",
    "relative_error",
    "mean_abs_error_tokens",
    "exact_share",
)

# cached_tokens of fa-0..2, fb-0..2 -> {(family, revision): expected COLS}, by hand.
REQUEST_CASES = {
    "exact": (
        [0, 0, 1088, 0, 0, 1088],
        {
            ("fa", "r1"): (3, 0, 1088, 1088, 0, 0.0, 0.0, 1.0),
            ("fb", "r2"): (3, 0, 1088, 1088, 0, 0.0, 0.0, 1.0),
            (ALL, ALL): (6, 0, 2176, 2176, 0, 0.0, 0.0, 1.0),
        },
    ),
    "engine kept the junction state, one request unobserved": (
        [0, 1088, 1088, None, 0, 544],
        {
            ("fa", "r1"): (3, 0, 2176, 1088, -1088, -0.5, 1088 / 3, 2 / 3),
            ("fb", "r2"): (2, 1, 544, 1088, 544, 1.0, 272.0, 0.5),
            (ALL, ALL): (5, 1, 2720, 2176, -544, -0.2, 326.4, 0.6),
        },
    ),
    "nothing cached, a family unobserved": (
        [0, 0, 0, None, None, None],
        {
            ("fa", "r1"): (3, 0, 0, 1088, 1088, None, 1088 / 3, 2 / 3),
            ("fb", "r2"): (0, 3, 0, 0, 0, 0.0, None, None),
            (ALL, ALL): (3, 3, 0, 1088, 1088, None, 1088 / 3, 2 / 3),
        },
    ),
}


def same(got, want) -> bool:
    if want is None or got is None:
        return got is want
    return math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12)


@pytest.mark.parametrize("case", list(REQUEST_CASES))
def test_per_request_errors_by_hand(tmp_path, case):
    cached, expected = REQUEST_CASES[case]
    result = validate(db_path=build_db(tmp_path, cached))
    rows = result.table(CACHED).to_pylist()
    got = {(r["prompt_family"], r["model_revision"]): tuple(r[c] for c in COLS) for r in rows}
    assert list(got) == list(expected)  # groups in order, the overall row last
    for key, want in expected.items():
        assert all(same(g, w) for g, w in zip(got[key], want, strict=True)), (key, got[key])
    assert all(r["figure"] == "hit_tokens" for r in rows)
    assert result.requests == 6
    assert result.observed_requests == sum(c is not None for c in cached)


# (files: {name: counters}, options) -> {counter: (observed, predicted, error, relative)}
_AFTER = {
    Q: {'engine="0",model_name="m"': 10500, 'engine="1",model_name="m"': 3156},
    H: {'engine="0",model_name="m"': 1000, 'engine="1",model_name="m"': 632},
    S: {'engine="0",model_name="m"': 2010, 'engine="1",model_name="m"': 176},
}
_BEFORE = {
    Q: {'engine="0",model_name="m"': 500, 'engine="1",model_name="m"': 100},
    H: {'engine="0",model_name="m"': 0, 'engine="1",model_name="m"': 0},
    S: {'engine="0",model_name="m"': 10, 'engine="1",model_name="m"': 0},
}
_OTHER = 'engine="0",model_name="other"'
METRIC_CASES = {
    "one file, no sparse counter": (
        {"after": {Q: {'engine="0"': 13056}, H: {'engine="0"': 2176}}},
        {},
        {Q: (13056, 13056, 0, 0.0), H: (2176, 2176, 0, 0.0)},
    ),
    "deltas over two engines, another model filtered out": (
        {
            "before": {k: {**v, _OTHER: 7} for k, v in _BEFORE.items()},
            "after": {k: {**v, _OTHER: 1007} for k, v in _AFTER.items()},
        },
        {"model_name": "m"},
        {Q: (13056, 13056, 0, 0.0), H: (1632, 2176, 544, 1 / 3), S: (2176, 2176, 0, 0.0)},
    ),
    "window of family fb only": (
        {"after": {Q: {"": 6528}, H: {"": 1088}, S: {"": 0}}},
        {"since": "3", "until": "6"},
        {Q: (6528, 6528, 0, 0.0), H: (1088, 1088, 0, 0.0), S: (0, 1088, 1088, None)},
    ),
    "open-ended window from fb's first request": (
        {"after": {Q: {"": 6528}, H: {"": 0}}},
        {"since": "3"},
        {Q: (6528, 6528, 0, 0.0), H: (0, 1088, 1088, None)},
    ),
    "window closed on the right, RFC 3339 start": (
        {"after": {Q: {"": 6528}, H: {"": 0}}},
        {"since": "1970-01-01T00:00:00Z", "until": "3"},
        {Q: (6528, 6528, 0, 0.0), H: (0, 1088, 1088, None)},
    ),
}


@pytest.mark.parametrize("case", list(METRIC_CASES))
def test_counter_errors_by_hand(tmp_path, case):
    files, options, expected = METRIC_CASES[case]
    paths = {k: metrics_file(tmp_path / f"{k}.txt", v) for k, v in files.items()}
    if "before" in paths:
        kwargs = {"metrics_before": paths["before"], "metrics_after": paths["after"]}
    else:
        kwargs = {"metrics": paths["after"]}
    result = validate(db_path=build_db(tmp_path, [None] * 6), **kwargs, **options)
    assert result.table(CACHED).num_rows == 0  # no cached_tokens: nothing compared
    rows = result.table("metrics").to_pylist()
    got = {r["source"]: r for r in rows}
    assert list(got) == list(expected)
    for name, (observed, predicted, error, relative) in expected.items():
        r = got[name]
        assert (r["observed_tokens"], r["predicted_tokens"], r["error_tokens"]) == (
            observed,
            predicted,
            error,
        )
        assert same(r["relative_error"], relative)
        assert r["prompt_family"] == ALL and r["requests"] == (
            3 if {"since", "until"} & set(options) else 6
        )
    if S not in expected:
        assert "not exported" in result.metrics_note


def test_stored_and_exported(tmp_path):
    db = build_db(tmp_path, [0, 1088, 1088, None, 0, 544])
    after = metrics_file(tmp_path / "m.txt", {Q: {"": 13056}, H: {"": 2176}})
    out = tmp_path / "v.csv"
    first = validate(db_path=db, metrics=after, out=out)
    second = validate(db_path=db)
    assert (first.validation_id, second.validation_id) == (1, 2)
    stored = db_rows(db, "SELECT validation_id, count(*) FROM validations GROUP BY 1 ORDER BY 1")
    assert stored == [(1, 5), (2, 3)]  # 2 groups + overall + 2 counters; then 3
    with open(out) as f:
        exported = list(csv.DictReader(f))
    assert [r["source"] for r in exported] == [CACHED] * 3 + [Q, H]
    assert exported[2]["error_tokens"] == "-544" and exported[0]["run_id"] == "1"
    assert exported[3]["metrics_after"] == str(after)


def test_cli_prints_tables_and_not_observed(tmp_path):
    db = build_db(tmp_path, [0, 1088, 1088, None, 0, 544])
    after = metrics_file(tmp_path / "m.txt", {Q: {"": 13056}, H: {"": 2176}})
    res = CliRunner().invoke(cli, ["validate", "--db", str(db), "--metrics", str(after)])
    assert res.exit_code == 0, res.output
    assert "not observed: 1 of 6 requests has no cached_tokens" in res.output
    assert "(all)" in res.output and "-1,088" in res.output and "-544" in res.output
    assert "vllm:prefix_cache_sparse_retention_misses not exported" in res.output


def test_parser_reads_exposition_details(tmp_path):
    text = (
        "# HELP vllm:prefix_cache_hits Hits.\n"
        "# TYPE vllm:prefix_cache_hits counter\n"
        'vllm:prefix_cache_hits_total{model_name="a\\"b\\\\c",engine="0",} 5.0 1700000000\n'
        'vllm:prefix_cache_hits_created{model_name="x"} 1.7e9\n'
        'vllm:prefix_cache_hits{model_name="y"} 7 # {trace_id="t"} 1.0\n'
        'vllm:time_to_first_token_seconds_bucket{le="+Inf"} 3\n'
        "vllm:num_requests_running NaN\n"
        "# EOF\n"
    )
    path = tmp_path / "m.txt"
    path.write_text(text)
    got = read_counters(path, frozenset(["vllm:prefix_cache_hits"]))
    assert [(s.labels, s.value, s.line_no) for s in got] == [
        ((("engine", "0"), ("model_name", 'a"b\\c')), 5, 3),
        ((("model_name", "y"),), 7, 5),
    ]
    assert parse_sample_line("x 1e3") == ("x", (), 1000.0)


def test_counter_deltas_sum_label_sets(tmp_path):
    before = metrics_file(tmp_path / "a.txt", _BEFORE)
    after = metrics_file(tmp_path / "b.txt", _AFTER)
    got = {d.name: (d.observed_tokens, d.label_sets) for d in counter_deltas(after, before)}
    assert got == {Q: (13056, 2), H: (1632, 2), S: (2176, 2)}


def run_cli(*args):
    return CliRunner().invoke(cli, ["validate", *[str(a) for a in args]])


def one_line_error(res, exit_code: int, *parts: str) -> None:
    assert res.exit_code == exit_code, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.output
    assert "Traceback" not in res.output
    for part in parts:
        assert part in lines[0], lines[0]


def test_error_unknown_run(tmp_path):
    db = build_db(tmp_path, [0] * 6)
    one_line_error(run_cli("--db", db, "--run", 9), 2, "unknown run 9; known runs: 1")


def test_error_no_replay_run(tmp_path):
    db = build_db(tmp_path, [0] * 6, replay=False)
    one_line_error(run_cli("--db", db), 1, "no replay runs", "hpa replay")


def test_error_no_database(tmp_path):
    one_line_error(run_cli("--db", tmp_path / "none.duckdb"), 1, "no such database")


def test_error_no_observed_data(tmp_path):
    db = build_db(tmp_path, [None] * 6)
    one_line_error(run_cli("--db", db), 1, "no observed data", "run 1 (6 requests)", "--metrics")


def test_error_empty_window(tmp_path):
    db = build_db(tmp_path, [0] * 6)
    res = run_cli("--db", db, "--since", 100)
    one_line_error(res, 2, "no requests in run 1, 100 <= timestamp_s")


@pytest.mark.parametrize(
    ("args", "parts"),
    [
        (["--since", "soon"], ["--since 'soon'"]),
        (["--since", "5", "--until", "5"], ["must be before --until"]),
        (["--metrics-before", "a.txt"], ["give both"]),
        (["--metrics", "a.txt", "--metrics-after", "b.txt"], ["give it alone"]),
        (["--out", "v.html"], ["unknown format '.html'"]),
    ],
)
def test_error_bad_options(tmp_path, args, parts):
    db = build_db(tmp_path, [0] * 6)
    one_line_error(run_cli("--db", db, *args), 2, *parts)


BAD_LINES = {
    "unterminated labels": ('vllm:prefix_cache_hits_total{engine="0" 12', "expected ',' or '}'"),
    "no value": ('vllm:prefix_cache_hits_total{engine="0"}', "expected a value"),
    "html page": ("<html><body>502 Bad Gateway</body></html>", "expected a metric name"),
    "not a number": ("vllm:prefix_cache_hits_total twelve", "'twelve' is not a number"),
    "negative counter": ("vllm:prefix_cache_hits_total -5", "not a whole number"),
    "fractional counter": ("vllm:prefix_cache_hits_total 1.5", "not a whole number"),
    "duplicate sample": ("vllm:prefix_cache_queries_total 1", "appears twice (first at line 3)"),
    "bad escape": ('vllm:x{a="\\q"} 1', "bad escape"),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_error_bad_metrics_line_names_file_and_line(tmp_path, case):
    db = build_db(tmp_path, [0] * 6)
    line, reason = BAD_LINES[case]
    path = metrics_file(tmp_path / "m.txt", {Q: {"": 1}, H: {"": 1}}, extra=line + "\n")
    bad_line = len(path.read_text().splitlines())
    one_line_error(run_cli("--db", db, "--metrics", path), 2, f"{path}:{bad_line}: ", reason)


def test_error_counter_decreased(tmp_path):
    db = build_db(tmp_path, [0] * 6)
    before = metrics_file(tmp_path / "a.txt", {Q: {'engine="0"': 900}, H: {'engine="0"': 50}})
    after = metrics_file(tmp_path / "b.txt", {Q: {'engine="0"': 100}, H: {'engine="0"': 60}})
    res = run_cli("--db", db, "--metrics-before", before, "--metrics-after", after)
    one_line_error(
        res, 2, f"{after}:3: vllm:prefix_cache_queries", "decreased from 900", "restarted"
    )


def test_error_label_set_vanished(tmp_path):
    db = build_db(tmp_path, [0] * 6)
    two = {'engine="0"': 1, 'engine="1"': 1}
    before = metrics_file(tmp_path / "a.txt", {Q: two, H: two})
    after = metrics_file(tmp_path / "b.txt", {Q: {'engine="0"': 5}, H: two})
    res = run_cli("--db", db, "--metrics-before", before, "--metrics-after", after)
    one_line_error(res, 2, 'vllm:prefix_cache_queries{engine="1"}', f"{before}:4", "is missing")


def test_error_not_vllm_metrics(tmp_path):
    db = build_db(tmp_path, [0] * 6)
    path = tmp_path / "node.txt"
    path.write_text("# TYPE node_load1 gauge\nnode_load1 0.5\n")
    one_line_error(run_cli("--db", db, "--metrics", path), 2, "no vllm:prefix_cache_queries")


def test_error_model_name_not_found(tmp_path):
    db = build_db(tmp_path, [0] * 6)
    path = metrics_file(tmp_path / "m.txt", {Q: {'model_name="a"': 1, 'model_name="b"': 1}, H: {}})
    res = run_cli("--db", db, "--metrics", path, "--model-name", "c")
    one_line_error(res, 2, "model_name='c'", "model names there: a, b")


def test_error_missing_metrics_file(tmp_path):
    db = build_db(tmp_path, [0] * 6)
    res = run_cli("--db", db, "--metrics", tmp_path / "nope.txt")
    one_line_error(res, 2, "nope.txt: no such metrics file")


def test_read_counters_rejects_binary(tmp_path):
    path = tmp_path / "m.bin"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputFileError, match="not UTF-8"):
        read_counters(path, frozenset([Q]))


def test_error_optional_counter_vanished(tmp_path):
    """A sparse-retention counter in the first scrape but not the second: another server."""
    db = build_db(tmp_path, [0] * 6)
    one = {'engine="0"': 1}
    before = metrics_file(tmp_path / "a.txt", {Q: one, H: one, S: one})
    after = metrics_file(tmp_path / "b.txt", {Q: one, H: one})
    res = run_cli("--db", db, "--metrics-before", before, "--metrics-after", after)
    one_line_error(res, 2, "vllm:prefix_cache_sparse_retention_misses", "is missing")
