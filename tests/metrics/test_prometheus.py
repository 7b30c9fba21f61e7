"""`hpa metrics`: Prometheus text of a replay run, checked with prometheus_client's parser."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import ConfigError, StoreError
from analyzer.metrics.prometheus import escape_label_value
from analyzer.pipeline.metrics import prometheus_metrics
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from tests.conftest import db_rows, write_jsonl
from tests.metrics.conftest import SAMPLES, groups_records

parser = pytest.importorskip("prometheus_client.parser")

FAMILIES = [
    ("vllm:prefix_cache_queries", "sum(prompt_tokens)"),
    ("vllm:prefix_cache_hits", "sum(hit_tokens)"),
    ("vllm:prefix_cache_sparse_retention_misses", "sum(sparse_retention_miss_tokens)"),
    ("hpa_replay_requests", "count(*)"),
]
CAUSE_SQL = {
    "unshared": "unshared_tokens",
    "routing": "lost_routing_tokens",
    "granularity": "lost_granularity_tokens",
    "in_flight": "lost_in_flight_tokens",
    "eviction": "lost_eviction_tokens",
    "sparse_retention_never_kept": "sparse_retention_miss_never_kept_tokens",
    "sparse_retention_evicted": "sparse_retention_miss_evicted_tokens",
    "spec_decode": "lost_spec_decode_tokens",
}


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def parse(text: str) -> dict:
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


def sql_sums(db, run_id: int, expr: str) -> dict:
    return {
        (fam, rev): value
        for fam, rev, value in db_rows(
            db,
            f"SELECT prompt_family, model_revision, {expr} FROM replay_requests "
            f"WHERE run_id = {run_id} GROUP BY ALL",
        )
    }


@pytest.mark.parametrize("run_id", [1, 2])
def test_parses_and_equals_sql_sums(groups_db, run_id):
    text = prometheus_metrics(db_path=groups_db, run=run_id).text
    families = parse(text)
    assert list(families) == [name for name, _ in FAMILIES[:3]] + [
        "hpa_prefix_cache_lost_tokens",
        "hpa_replay_requests",
    ]
    for name, expr in FAMILIES:
        fam = families[name]
        assert fam.type == "counter" and fam.documentation
        got = {}
        for s in fam.samples:
            assert s.name == name + "_total" and s.labels["run"] == str(run_id)
            got[(s.labels["prompt_family"], s.labels["model_revision"])] = s.value
        assert got == sql_sums(groups_db, run_id, expr)
        assert len(got) == 8
    lost = families["hpa_prefix_cache_lost_tokens"]
    for cause, column in CAUSE_SQL.items():
        got = {
            (s.labels["prompt_family"], s.labels["model_revision"]): s.value
            for s in lost.samples
            if s.labels["cause"] == cause
        }
        assert got == sql_sums(groups_db, run_id, f"sum({column})")
    # hits + every cause = queries, per label set
    for key, queries in sql_sums(groups_db, run_id, "sum(prompt_tokens)").items():
        hits = sql_sums(groups_db, run_id, "sum(hit_tokens)")[key]
        causes = sum(
            s.value
            for s in lost.samples
            if (s.labels["prompt_family"], s.labels["model_revision"]) == key
        )
        assert hits + causes == queries


def test_exact_totals_of_the_two_runs(groups_db):
    def total(run_id, name):
        families = parse(prometheus_metrics(db_path=groups_db, run=run_id).text)
        return sum(s.value for s in families[name].samples)

    assert total(1, "vllm:prefix_cache_queries") == 70400
    assert total(1, "vllm:prefix_cache_hits") == 38016
    assert total(1, "vllm:prefix_cache_sparse_retention_misses") == 0
    assert total(2, "vllm:prefix_cache_hits") == 25344
    assert total(2, "vllm:prefix_cache_sparse_retention_misses") == 12672


def test_text_layout_is_deterministic_and_defaults_to_the_latest_run(groups_db):
    latest = prometheus_metrics(db_path=groups_db)
    assert latest.run_id == 2
    assert latest.text == prometheus_metrics(db_path=groups_db, run=2).text
    lines = latest.text.splitlines()
    assert lines[0].startswith("# HELP vllm:prefix_cache_queries_total ")
    assert lines[1] == "# TYPE vllm:prefix_cache_queries_total counter"
    assert lines[2] == (
        'vllm:prefix_cache_queries_total{run="2",prompt_family="group-0",'
        'model_revision="rev-a"} 8800'
    )
    assert latest.text.endswith("\n")
    assert sum(line.startswith("# TYPE ") for line in lines) == 5
    assert len(lines) == 5 * 2 + 8 * (4 + 8)  # 4 plain families + 8 causes per label set


def test_label_values_are_escaped(tmp_path):
    weird = 'we"ird\\fam\nily'
    records = groups_records(prompt_family=[weird] * 32)
    db = tmp_path / "w.duckdb"
    ingest([write_jsonl(tmp_path / "w.jsonl", records)], db_path=db)
    run_replay(make_policy({"block_size": 528}), db_path=db)
    text = prometheus_metrics(db_path=db).text
    assert 'prompt_family="we\\"ird\\\\fam\\nily"' in text
    families = parse(text)
    labels = {s.labels["prompt_family"] for s in families["vllm:prefix_cache_hits"].samples}
    assert labels == {weird}
    assert escape_label_value('a\\"\n') == 'a\\\\\\"\\n'


def test_null_labels_become_none(tmp_path):
    db = tmp_path / "d.duckdb"
    ingest([SAMPLES / "diagnostic_1088.jsonl"], db_path=db)  # no model_revision
    run_replay(make_policy({"block_size": 544}), db_path=db)
    families = parse(prometheus_metrics(db_path=db).text)
    (sample,) = families["vllm:prefix_cache_sparse_retention_misses"].samples
    assert sample.labels["model_revision"] == "(none)" and sample.value == 1088


def test_unknown_run_lists_known_runs(groups_db):
    with pytest.raises(ConfigError, match=r"^unknown run 9; known runs: 1, 2$"):
        prometheus_metrics(db_path=groups_db, run=9)
    result = run("metrics", "--db", groups_db, "--run", 9)
    assert result.exit_code == 2
    assert result.stderr == "Error: unknown run 9; known runs: 1, 2\n"


def test_no_replay_yet_and_no_database(tmp_path):
    db = tmp_path / "d.duckdb"
    ingest([SAMPLES / "diagnostic_1088.jsonl"], db_path=db)
    with pytest.raises(StoreError, match="no replay runs"):
        prometheus_metrics(db_path=db)
    result = run("metrics", "--db", db)
    assert result.exit_code == 1
    assert result.stderr == ("Error: no replay runs in the database; run `hpa replay` first\n")
    result = run("metrics", "--db", tmp_path / "missing.duckdb")
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert "no such database" in result.stderr


def test_cli_prints_and_writes(groups_db, tmp_path):
    result = run("metrics", "--db", groups_db, "--run", 1)
    assert result.exit_code == 0, result.output
    assert result.stdout == prometheus_metrics(db_path=groups_db, run=1).text
    out = tmp_path / "hpa.prom"
    result = run("metrics", "--db", groups_db, "--out", out)
    assert result.exit_code == 0 and result.stdout == f"run 2: wrote {out}\n"
    assert out.read_text() == prometheus_metrics(db_path=groups_db).text


def test_unwritable_out_is_one_line(groups_db, tmp_path):
    (tmp_path / "a-file").write_text("")
    result = run("metrics", "--db", groups_db, "--out", tmp_path / "a-file" / "x.prom")
    assert (result.exit_code, result.stderr) == (
        2,
        f"Error: --out {tmp_path / 'a-file' / 'x.prom'}: {tmp_path / 'a-file'} is not a folder\n",
    )


def test_a_run_measured_from_a_later_request_counts_its_measured_requests(tmp_path):
    """`hpa replay --measure-from 0.5` prints and stores (replay_runs) the second half's
    figures; the counters summed every request, warm-up included (Mooncake: 144,793,823
    queried tokens where replay printed 67,915,607)."""
    db = tmp_path / "m.duckdb"
    ingest([write_jsonl(tmp_path / "m.jsonl", groups_records())], db_path=db)
    run_replay(make_policy({"block_size": 528}), db_path=db, measure_from=0.5)
    families = parse(prometheus_metrics(db_path=db).text)

    def total(name):
        return sum(s.value for s in families[name].samples)

    stored = db_rows(db, "SELECT prompt_tokens, hit_tokens FROM replay_runs WHERE run_id = 1")
    assert (total("vllm:prefix_cache_queries"), total("vllm:prefix_cache_hits")) == stored[0]
    assert total("hpa_replay_requests") == 16
