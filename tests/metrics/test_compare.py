"""`hpa compare`: two windows of a run or two runs, shares of queried tokens, one sentence."""

from __future__ import annotations

import math

import orjson
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import ConfigError
from analyzer.metrics.compare import parse_window
from analyzer.pipeline.compare import compare
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from tests.conftest import write_jsonl
from tests.metrics.conftest import SAMPLES, groups_records


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def rows_by(table, *keys) -> dict:
    return {tuple(r[k] for k in keys): r for r in table.to_pylist()}


def test_two_runs_exact_shares_and_sentence(groups_db):
    # run 1 keeps every state: 38,016 hits of 70,400; run 2 (retention 0): 25,344 hits and
    # 12,672 sparse-retention misses, the same in each of the 8 families (8,800 tokens each)
    result = compare(db_path=groups_db, runs=(1, 2))
    assert (result.baseline.run_id, result.current.run_id) == (1, 2)
    assert result.baseline.requests == result.current.requests == 32
    groups = result.groups.to_pylist()
    assert [(g["prompt_family"], g["model_revision"]) for g in groups] == [
        (f"group-{i}", "rev-a" if i < 4 else "rev-b") for i in range(8)
    ] + [("(all)", "(all)")]
    total = groups[-1]
    assert total["baseline_useful_hit_ratio"] == pytest.approx(38016 / 70400)
    assert total["current_useful_hit_ratio"] == pytest.approx(25344 / 70400)
    assert total["change_points"] == pytest.approx(-18.0)
    causes = rows_by(result.causes, "prompt_family", "model_revision", "figure")
    g0 = causes[("group-0", "rev-a", "sparse_retention")]
    assert (g0["baseline_tokens"], g0["current_tokens"]) == (0, 1584)
    assert g0["current_share"] == pytest.approx(0.18)
    assert g0["change_points"] == pytest.approx(18.0)
    assert g0["contribution_points"] == pytest.approx(18.0 / 8)
    assert g0["rate_effect_points"] == pytest.approx(18.0 / 8)  # same traffic: no mix
    assert g0["mix_effect_points"] == 0.0
    never = causes[("(all)", "(all)", "sparse_retention_never_kept")]
    assert never["current_tokens"] == 12672
    # hit + the six causes = 100% of each side's queried tokens
    for side in ("baseline", "current"):
        shares = [
            causes[("(all)", "(all)", f)][f"{side}_share"]
            for f in ("hit", "unshared", "routing", "granularity", "eviction")
            + ("sparse_retention", "spec_decode")
        ]
        assert math.fsum(shares) == pytest.approx(1.0)
    assert result.ttft_source == "unavailable"
    assert total["est_ttft_change_ms"] is None
    assert result.sentence == (
        "useful hit ratio fell 18.0 points (54.0% -> 36.0% of queried tokens; -18.0 from the "
        "groups' own hit ratios, +0.0 from the traffic mix), mostly "
        "sparse-retention misses (+18.0 points of queried tokens), largest in "
        "group-0 @ rev-a (+18.0 points of its queried tokens); the lever: the retention "
        "interval (retention_interval) or the prefill chunking (max_num_batched_tokens): "
        "where recurrent states are kept; TTFT change unavailable."
    )
    assert result.fit_lines() == [
        "TTFT change unavailable: the trace has no ttft_ms and the run names no model preset"
    ]


def test_two_windows_of_one_run_compare_shares_of_each_window(groups_db):
    # run 2, group-0: requests 0, 1 (hit 0, miss 1,584) vs 2, 3 (hits 1,584 each)
    result = compare(db_path=groups_db, window="2..4", baseline="0..2", runs=(2,))
    assert (result.baseline.requests, result.current.requests) == (2, 2)
    (group,) = result.groups.to_pylist()
    assert (group["prompt_family"], group["model_revision"]) == ("group-0", "rev-a")
    assert group["baseline_useful_hit_ratio"] == 0.0
    assert group["current_useful_hit_ratio"] == pytest.approx(3168 / 4400)
    causes = rows_by(result.causes, "figure")
    assert causes[("unshared",)]["baseline_tokens"] == 2800
    assert causes[("unshared",)]["current_tokens"] == 1200
    assert causes[("unshared",)]["change_points"] == pytest.approx(-1600 / 44)
    assert causes[("sparse_retention",)]["change_points"] == pytest.approx(-36.0)
    assert causes[("granularity",)]["change_points"] == pytest.approx(16 / 44)
    traffic = {r["measure"]: r for r in result.traffic.to_pylist()}
    assert (traffic["requests"]["baseline"], traffic["requests"]["current"]) == (2, 2)
    assert traffic["prompt_tokens"]["current"] == 4400
    assert traffic["span_s"]["baseline"] == 1.0  # requests at 0 s and 1 s
    assert traffic["requests_per_s"]["baseline"] == 2.0
    assert traffic["prompt_families"]["change_percent"] == 0.0
    assert result.sentence == (
        "useful hit ratio rose 72.0 points (0.0% -> 72.0% of queried tokens), mostly "
        "unshared prefixes (-36.4 points of queried tokens); TTFT change unavailable."
    )


def test_windows_default_to_the_latest_run_and_accept_rfc3339(groups_db):
    by_seconds = compare(db_path=groups_db, window="16..", baseline="..16")
    assert by_seconds.current.run_id == 2
    by_date = compare(
        db_path=groups_db,
        window="1970-01-01T00:00:16Z..",
        baseline="1970-01-01T00:00:00+00:00..1970-01-01T00:00:16Z",
    )
    assert by_date.groups == by_seconds.groups
    assert (by_date.baseline.requests, by_date.current.requests) == (16, 16)
    # the revisions split by time: each family lies in one window only
    assert by_date.sentence.startswith("useful hit ratio unchanged (36.0% -> 36.0%")


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [("0..300", 0.0, 300.0), ("1.5..2", 1.5, 2.0), ("..5", -math.inf, 5.0), ("5..", 5.0, math.inf)],
)
def test_parse_window(text, start, end):
    w = parse_window(text)
    assert (w.start_s, w.end_s) == (start, end)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0-300", "expected START..END"),
        ("x..3", "start: 'x' is not an RFC 3339 date-time"),
        ("1..2026-01-01T00:00:00", "end: '2026-01-01T00:00:00' has no UTC offset"),
        ("5..1", "start must be before end"),
        ("3..3", "start must be before end"),
        ("nan..3", "is not finite"),
    ],
)
def test_bad_windows(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_window(text)


def one_line_error(result, exit_code: int, text: str) -> None:
    assert result.exit_code == exit_code, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("Error: ")
    assert text in result.stderr


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--window", "0-3", "--baseline", "0..2"], "bad window '0-3': expected START..END"),
        (["--window", "2..4", "--baseline", "100..200"], "window 100..200 holds no requests"),
        (["--window", "2..4", "--baseline", "0..2", "--run", "9"], "unknown run 9; known"),
        (["--run", "1", "--run", "9"], "unknown run 9; known runs: 1, 2"),
        (
            ["--window", "2..4", "--baseline", "0..2", "--run", "1", "--run", "2"],
            "--window/--baseline compare one run, got 2 --run",
        ),
        (["--window", "2..4"], "--baseline is missing"),
        (["--baseline", "2..4"], "--window is missing"),
        (["--run", "1"], "one --run needs --window and --baseline, or a second --run"),
        ([], "nothing to compare"),
        (["--run", "1", "--run", "2", "--run", "1"], "nothing to compare"),
    ],
)
def test_cli_errors_are_one_line(groups_db, args, text):
    one_line_error(run("compare", "--db", groups_db, *args), 2, text)


def test_empty_window_names_the_span(groups_db):
    result = run("compare", "--db", groups_db, "--window", "40..50", "--baseline", "0..2")
    one_line_error(
        result, 2, "window 40..50 holds no requests of run 2 (its timestamps span 0..31 s)"
    )


@pytest.mark.parametrize(
    ("args", "warning"),
    [
        (
            ["--window", "2..", "--baseline", "0..4"],
            "the window 2.. and the baseline 0..4 overlap (2..4 s): the requests of that time "
            "are on both sides, so the change understates what moved",
        ),
        (
            ["--window", "0..4.5", "--baseline", "0..4.5"],
            "the window 0..4.5 and the baseline 0..4.5 overlap (0..4.5 s): the requests of "
            "that time are on both sides, so the change understates what moved",
        ),
        (["--run", "2", "--run", "2"], "run 2 is compared with itself: nothing can differ"),
        (["--window", "2..4", "--baseline", "0..2"], None),  # touching windows do not overlap
        (["--run", "1", "--run", "2"], None),
    ],
)
def test_overlapping_windows_and_a_run_with_itself_are_one_warning_line(groups_db, args, warning):
    for fmt in ("table", "json"):
        result = run("compare", "--db", groups_db, *args, "--format", fmt)
        assert result.exit_code == 0, result.output
        assert result.stderr == ("" if warning is None else f"warning: {warning}\n")
    assert orjson.loads(result.stdout)["warnings"] == ([] if warning is None else [warning])


def test_two_replays_of_the_same_policy_are_one_run(tmp_path):
    db = tmp_path / "same.duckdb"
    ingest([SAMPLES / "groups_1600.jsonl"], db_path=db)
    for _ in range(2):
        run_replay(make_policy({"block_size": 528}), db_path=db)
    run_replay(make_policy({"block_size": 528}), db_path=db, measure_from=0.5)
    said = run("compare", "--db", db, "--run", "1", "--run", "2")
    assert said.exit_code == 0, said.output
    assert said.stderr == (
        "warning: runs 1 and 2 replayed the same trace with the same policy: they are one "
        "replay, nothing can differ\n"
    )
    assert run("compare", "--db", db, "--run", "1", "--run", "3").stderr == (
        "warning: runs 1 and 3 count different requests (--measure-from 0 and 0.5): the change "
        "mixes the requests each leaves out with what the runs replayed differently\n"
    )  # measured apart: not one replay, but not the same requests either


def test_runs_of_different_traces_are_refused(tmp_path):
    db = tmp_path / "d.duckdb"
    ingest([SAMPLES / "diagnostic_1088.jsonl"], db_path=db)
    run_replay(make_policy({"block_size": 544}), db_path=db)
    ingest([SAMPLES / "groups_1500.jsonl"], db_path=db)
    run_replay(make_policy({"block_size": 544}), db_path=db)
    one_line_error(
        run("compare", "--db", db, "--run", "1", "--run", "2"), 2, "replayed different traces"
    )


def test_no_database_and_no_timestamps(tmp_path):
    one_line_error(
        run("compare", "--db", tmp_path / "no.duckdb", "--run", 1, "--run", 2),
        1,
        "no such database",
    )
    db = tmp_path / "n.duckdb"
    records = groups_records(timestamp=[None] * 32)
    ingest([write_jsonl(tmp_path / "n.jsonl", records)], db_path=db)
    one_line_error(
        run("compare", "--db", db, "--window", "0..2", "--baseline", "2..4"),
        1,
        "no replay runs in the database; run `hpa replay` first",
    )
    run_replay(make_policy({"block_size": 528}), db_path=db)
    one_line_error(
        run("compare", "--db", db, "--window", "0..2", "--baseline", "2..4"),
        2,
        "run 1's requests have no timestamps",
    )


def test_cli_table_and_json(groups_db):
    result = run("compare", "--db", groups_db, "--run", 1, "--run", 2)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "baseline: run 1 (32 requests)"
    assert lines[1] == "current: run 2 (32 requests)"
    assert "sparse_retention" in result.stdout
    assert lines[-1] == compare(db_path=groups_db, runs=(1, 2)).sentence
    result = run("compare", "--db", groups_db, "--run", 1, "--run", 2, "--format", "json")
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert doc["baseline"] == {"run_id": 1, "window": None, "requests": 32}
    assert doc["groups"][-1]["change_points"] == pytest.approx(-18.0)
    assert len(doc["causes"]) == 9 * 10  # 9 groups x 10 figures (the hit and the causes)
    assert doc["sentence"].startswith("useful hit ratio fell 18.0 points")
    assert doc["ttft_model"]["source"] == "unavailable"
    result = run(
        "compare", "--db", groups_db, "--window", "2..4", "--baseline", "0..2", "--format", "json"
    )
    doc = orjson.loads(result.stdout)
    assert doc["current"]["window"] == {"text": "2..4", "start_s": 2.0, "end_s": 4.0}


def test_concurrent_runs_compare_simulated_ttft_and_in_flight(tmp_path):
    """Two concurrent replays of the mixed sample, a roomy pool and a tight one under a
    compressed clock: the sentence reports the simulated TTFT change and its queueing part,
    and every group's figures still sum to its queried tokens."""
    db = tmp_path / "c.duckdb"
    ingest([SAMPLES / "mixed.jsonl.gz"], db_path=db)
    load = {"block_size": 544, "schedule": "concurrent", "time_scale": 0.2}
    for num_blocks in (2000, 150):
        run_replay(make_policy({**load, "num_blocks": num_blocks}), db_path=db)
    result = compare(db_path=db, runs=(1, 2))
    top = result.groups.to_pylist()[-1]
    assert top["current_sim_ttft_s"] > top["baseline_sim_ttft_s"] > 0
    assert top["sim_queue_change_s"] > 0
    change = top["sim_ttft_change_s"]
    assert f"simulated TTFT {change:+.3f} s per request" in result.sentence
    causes = [r for r in result.causes.to_pylist() if r["prompt_family"] == "(all)"]
    by_figure = {r["figure"]: r for r in causes}
    assert by_figure["in_flight"]["baseline_tokens"] > 0
    parts = ("hit", "unshared", "routing", "granularity", "in_flight", "eviction")
    for side in ("baseline", "current"):
        total = sum(by_figure[f][f"{side}_tokens"] for f in (*parts, "sparse_retention"))
        assert total + by_figure["spec_decode"][f"{side}_tokens"] == top[f"{side}_prompt_tokens"]
    out = run("compare", "--db", str(db), "--run", "1", "--run", "2")
    assert out.exit_code == 0 and "current_sim_ttft_s" in out.output


def test_serial_runs_have_no_simulated_ttft(groups_db):
    result = compare(db_path=groups_db, runs=(1, 2))
    assert result.groups.column("sim_ttft_change_s").null_count == result.groups.num_rows
    assert "simulated" not in result.sentence


@pytest.fixture(scope="module")
def measured_db(tmp_path_factory):
    """groups_1600's two runs (conftest) and run 3: run 2's policy measured from the 17th
    request (--measure-from 0.5): its figures count requests 16..31 only."""
    from tests.metrics.conftest import build_groups_db

    db = build_groups_db(tmp_path_factory.mktemp("measured") / "m.duckdb", groups_records())
    run_replay(make_policy({"block_size": 528}), db_path=db, measure_from=0.5)
    return db


def test_a_run_measured_from_a_later_request_is_compared_over_its_measured_requests(
    measured_db,
):
    """`hpa replay --measure-from 0.5` prints and stores (replay_runs) the second half's
    figures; compare counted every request, warm-up included (Mooncake: 'unchanged (32.6%)'
    where replay printed 35.0% for the run measured from its middle)."""
    from tests.conftest import db_rows

    result = compare(db_path=measured_db, runs=(2, 3))
    stored = db_rows(
        measured_db, "SELECT prompt_tokens, hit_tokens FROM replay_runs WHERE run_id = 3"
    )
    (prompt, hits) = stored[0]
    assert (result.baseline.requests, result.current.requests) == (32, 16)
    total = result.groups.to_pylist()[-1]
    assert total["current_useful_hit_ratio"] == pytest.approx(hits / prompt)
    traffic = {r["measure"]: r for r in result.traffic.to_pylist()}
    assert traffic["prompt_tokens"]["current"] == prompt
    assert traffic["requests"]["current"] == 16


def test_windows_of_a_run_measured_from_a_later_request_count_its_measured_requests(
    measured_db,
):
    # run 3 measures requests 16..31 (16 s and later): 8..24 holds 8 of them
    result = compare(db_path=measured_db, window="24..", baseline="8..24", runs=(3,))
    assert (result.baseline.requests, result.current.requests) == (8, 8)
    one_line_error(
        run("compare", "--db", measured_db, "--run", 3, "--window", "0..8", "--baseline", "24.."),
        2,
        "window 0..8 holds no measured requests of run 3 (--measure-from 0.5: its measured "
        "requests' timestamps span 16..31 s)",
    )


def test_every_fit_line_names_the_run_it_was_fitted_on(groups_db):
    """A revision with too few distinct fresh-prefill counts printed 'TTFT fit REV: not
    enough distinct fresh-prefill counts', without the '(run N)' of the other fit lines."""
    import dataclasses

    from analyzer.metrics.ttft import TtftFit

    result = compare(db_path=groups_db, runs=(1, 2))
    fits = {"rev-a": None, "rev-b": TtftFit(100.0, 0.02, 0.8, 16)}
    shown = dataclasses.replace(result, ttft_source="trace ttft_ms", fits=fits)
    assert shown.fit_lines() == [
        "TTFT fit rev-a (run 1): not enough distinct fresh-prefill counts",
        "TTFT fit rev-b (run 1): ttft_ms = 100.0 + 0.02000 x fresh_prefill_tokens "
        "(R^2 0.800, n 16)",
    ]


def test_the_tables_show_the_largest_families_and_say_how_to_see_them_all(tmp_path):
    """As `hpa replay`: the 20 families with the most queried tokens (both sides), the
    overall row, and one line for the others (a table of 2,212 derived families printed a
    line each, and each cause of each)."""
    records = groups_records(prompt_family=[f"f{i:02d}" for i in range(32)])
    for i, r in enumerate(records):  # the later families longer
        r["prompt_token_ids"] = r["prompt_token_ids"] + list(range(900_000, 900_000 + i))
    db = tmp_path / "f.duckdb"
    ingest([write_jsonl(tmp_path / "f.jsonl", records)], db_path=db)
    for keys in ({"retention_interval": None, "max_num_batched_tokens": 2048}, {}):
        run_replay(make_policy({"block_size": 528, **keys}), db_path=db)
    said = run("compare", "--db", db, "--run", 1, "--run", 2)
    assert said.exit_code == 0, said.output
    lines = said.stdout.splitlines()
    top = [f"f{i:02d}" for i in range(12, 32)]
    start = next(k for k, line in enumerate(lines) if line.startswith("prompt_family")) + 2
    assert [line.split()[0] for line in lines[start : start + 21]] == [*top, "(all)"]
    hidden = sum(len(r["prompt_token_ids"]) for r in records[:12])
    assert lines[start + 21] == (
        f"... and 12 more families x revisions ({2 * hidden:,} queried tokens, both sides): "
        "--format json lists every one"
    )
    causes = lines[lines.index(lines[start + 21]) + 1 :]
    assert not any(line.startswith(("f00 ", "f11 ")) for line in causes)
    assert any(line.startswith("f31 ") for line in causes)
    every = orjson.loads(
        run("compare", "--db", db, "--run", 1, "--run", 2, "--format", "json").stdout
    )
    assert len(every["groups"]) == 33
