"""`hpa sweep` and `hpa plan`: stored runs and tables, one-pass points, errors, the planner."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.config.memory import parse_size
from analyzer.pipeline.plan import plan
from analyzer.pipeline.replay import run_replay
from analyzer.pipeline.sweep import parse_vary, run_sweeps
from analyzer.sim.dispatch import make_policy
from tests.conftest import db_rows

FA64 = ['groups=["full_attention"]', "block_size=64"]


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_num_blocks_sweep_one_pass_equals_replays(mixed_db):
    (sweep,) = run_sweeps("vllm-default", FA64, ["num_blocks=100,500,2000,5000"], db_path=mixed_db)
    assert [p.one_pass for p in sweep.points] == [True] * 4
    hits = [p.hit_tokens for p in sweep.points]
    assert hits == [1_781_952, 2_583_040, 2_701_184, 2_718_912]
    assert [p.prompt_tokens for p in sweep.points] == [3_557_670] * 4
    # The same runs, replayed one by one, store identical per-request rows.
    for point, n in zip(sweep.points, (100, 500, 2000, 5000), strict=True):
        policy = make_policy({"groups": ["full_attention"], "block_size": 64, "num_blocks": n})
        separate = run_replay(policy, db_path=mixed_db)
        cols = "request_id, replica, hit_tokens, attention_match_tokens, lost_eviction_tokens"
        q = "SELECT {} FROM replay_requests WHERE run_id = {} ORDER BY arrival_seq"
        assert db_rows(mixed_db, q.format(cols, point.run_id)) == db_rows(
            mixed_db, q.format(cols, separate.run_id)
        )


def test_concurrent_num_blocks_sweep_replays_every_point(mixed_db):
    """Under load no stack-distance pass is exact: each point is a concurrent replay."""
    load = [*FA64, "schedule=concurrent", "time_scale=0.2"]
    (sweep,) = run_sweeps("vllm-default", load, ["num_blocks=300,3000"], db_path=mixed_db)
    assert [p.one_pass for p in sweep.points] == [False, False]
    for point, n in zip(sweep.points, (300, 3000), strict=True):
        values = {"groups": ["full_attention"], "block_size": 64, "num_blocks": n}
        values |= {"schedule": "concurrent", "time_scale": 0.2}
        separate = run_replay(make_policy(values), db_path=mixed_db)
        cols = "request_id, hit_tokens, lost_in_flight_tokens, num_preemptions, ttft_s"
        q = "SELECT {} FROM replay_requests WHERE run_id = {} ORDER BY arrival_seq"
        assert db_rows(mixed_db, q.format(cols, point.run_id)) == db_rows(
            mixed_db, q.format(cols, separate.run_id)
        )
    small, large = sweep.points
    assert small.hit_tokens < large.hit_tokens


def test_sweep_tables_runs_in_value_order_and_jobs_agree(groups_db):
    args = ["model=qwen3.5-4b"]
    a = run_sweeps(
        "vllm-default", args, ["retention_interval=0,null,1056"], jobs=2, db_path=groups_db
    )
    b = run_sweeps(
        "vllm-default", args, ["retention_interval=0,null,1056"], jobs=1, db_path=groups_db
    )
    (sa,), (sb,) = a, b
    assert [p.run_id for p in sa.points] == [1, 2, 3]
    assert [p.run_id for p in sb.points] == [4, 5, 6]
    strip = [(p.value, p.hit_tokens, p.sparse_retention_miss_tokens) for p in sa.points]
    assert strip == [(p.value, p.hit_tokens, p.sparse_retention_miss_tokens) for p in sb.points]
    assert strip == [("0", 25_344, 12_672), ("null", 25_344, 12_672), ("1056", 25_344, 12_672)]
    rows = db_rows(groups_db, "SELECT sweep_id, knob, value, run_id FROM sweep_points ORDER BY 4")
    assert rows[:3] == [
        (1, "retention_interval", v, i + 1) for i, v in enumerate(["0", "null", "1056"])
    ]
    assert db_rows(groups_db, "SELECT count(*) FROM sweeps") == [(2,)]


def test_memory_gib_and_grid(groups_db):
    (s,) = run_sweeps(
        "vllm-default",
        ["model=qwen3.5-4b"],
        ["num_blocks=30,60", "retention_interval=0,null"],
        grid=True,
        db_path=groups_db,
    )
    assert [p.value for p in s.points] == [
        "num_blocks=30,retention_interval=0",
        "num_blocks=30,retention_interval=null",
        "num_blocks=60,retention_interval=0",
        "num_blocks=60,retention_interval=null",
    ]
    assert s.points[0].memory_gib == pytest.approx(30 * 17_301_504 / 2**30)
    assert not any(p.one_pass for p in s.points)
    # No model preset: bytes per block unknown, so memory unknown.
    (s2,) = run_sweeps("vllm-default", ["block_size=784"], ["num_blocks=40"], db_path=groups_db)
    assert s2.points[0].memory_gib is None


def test_auto_curve_cli(groups_db):
    r = run(
        "sweep",
        "--db",
        str(groups_db),
        "--set",
        'groups=["full_attention"]',
        "--set",
        "block_size=528",
        "--vary",
        "num_blocks=auto",
    )
    assert r.exit_code == 0, r.output
    assert "from one stack-distance pass" in r.output
    assert "useful_hit_ratio" in r.output


@pytest.mark.parametrize(
    ("vary", "message"),
    [
        ("num_blocks", "expected KEY=V1,V2,..."),
        ("num_blocks=", "expected KEY=V1,V2,..."),
        ("num_blocks=10,,20", "empty value"),
        ("foo=1,2", "unknown policy key 'foo'"),
        ("num_blocks=1", "expected an integer >= 2"),
        ("routing=sideways", "'sideways' is not one of"),
        ("num_blocks=10,10", "repeated"),
    ],
)
def test_sweep_errors_are_one_line(groups_db, vary, message):
    r = run("sweep", "--db", str(groups_db), "--set", "model=qwen3.5-4b", "--vary", vary)
    assert r.exit_code == 2
    assert message in r.output
    assert r.output.count("\n") == 1


def test_sweep_auto_needs_full_attention_only(groups_db):
    r = run(
        "sweep", "--db", str(groups_db), "--set", "model=qwen3.5-4b", "--vary", "num_blocks=auto"
    )
    assert r.exit_code == 2 and "full-attention-only" in r.output


def test_parse_vary_lists():
    assert parse_vary("groups=[full_attention],[full_attention,mamba]") == (
        "groups",
        [["full_attention"], ["full_attention", "mamba"]],
    )
    assert parse_vary("retention_interval=0,null,1056") == ("retention_interval", [0, None, 1056])


def test_parse_size():
    assert parse_size("40GiB") == 40 * 2**30
    assert parse_size("512 MiB") == 512 * 2**20
    assert parse_size("1.5TiB") == int(1.5 * 2**40)
    assert parse_size("80GB") == 80 * 10**9
    assert parse_size("4096B") == 4096


UNITS = "B, KiB, MiB, GiB, TiB, or decimal KB, MB, GB, TB"
BAD_BUDGETS = [
    # (issue 47 item 9: `40` was read as 40 bytes and refused only after 40 replays)
    ("40", f"Error: --memory-budget '40': a size needs a unit: {UNITS} (e.g. 40GiB)\n"),
    ("1.5", f"Error: --memory-budget '1.5': a size needs a unit: {UNITS} (e.g. 1.5GiB)\n"),
    (
        "lots",
        "Error: --memory-budget 'lots': expected a size such as 40GiB or 512MiB "
        f"(units: {UNITS})\n",
    ),
    (
        "40XB",
        "Error: --memory-budget '40XB': expected a size such as 40GiB or 512MiB "
        f"(units: {UNITS})\n",
    ),
]


@pytest.mark.parametrize(("budget", "message"), BAD_BUDGETS)
def test_a_budget_without_a_unit_is_refused_before_any_replay(tmp_path, budget, message):
    # No database: the budget is refused before the trace is even opened.
    r = run("plan", "--db", str(tmp_path / "none.duckdb"), "--target-useful-hit-ratio", "0.3",
            "--model", "qwen3.5-4b", "--memory-budget", budget)  # fmt: skip
    assert (r.exit_code, r.stderr) == (2, message)


def test_plan_reachable_exact(groups_db):
    r = plan(0.3, model="qwen3.5-4b", db_path=groups_db)
    assert r.reachable
    assert r.attention_only_bound == pytest.approx(38_016 / 70_400)
    best = r.candidates[0]
    # Every request schedules from 12 blocks (5 of attention for 2,200 tokens at B = 528, the
    # rest Mamba states); the hits of the worked example (docs/definitions.md) need 15 (14 reach 0).
    assert (best.num_blocks, best.useful_hit_ratio) == (15, pytest.approx(25_344 / 70_400))
    assert (best.floor_blocks, best.sized_by) == (12, "target")
    assert best.memory_gib == pytest.approx(15 * 17_301_504 / 2**30)


def test_plan_unreachable_cli(groups_db):
    r = run(
        "plan", "--db", str(groups_db), "--target-useful-hit-ratio", "0.9", "--model", "qwen3.5-4b"
    )
    assert r.exit_code == 1
    assert "unreachable: target 0.900 is above the attention-only bound 0.540" in r.output
    assert "shared-prefix ceiling is 0.540" in r.output


def test_plan_budget_too_small_cli(groups_db):
    r = run(
        "plan",
        "--db",
        str(groups_db),
        "--target-useful-hit-ratio",
        "0.3",
        "--model",
        "qwen3.5-4b",
        "--memory-budget",
        "100MiB",
    )
    assert r.exit_code == 1
    assert r.output.splitlines()[-1] == (
        "unreachable within the memory budget: --memory-budget 100MiB holds 6 blocks per "
        "cache, and the longest request needs 12 (0.19 GiB per cache) to be scheduled at all "
        "[40 replays]"  # floors exact on the whole trace (pool.py); ceilings at 2 units
    )


def test_plan_errors(groups_db):
    r = run("plan", "--db", str(groups_db), "--target-useful-hit-ratio", "1.5")
    assert r.exit_code == 2 and "expected a number in (0, 1]" in r.output
    r = run(
        "plan",
        "--db",
        str(groups_db),
        "--target-useful-hit-ratio",
        "0.3",
        "--memory-budget",
        "lots",
    )
    assert r.exit_code == 2 and "expected a size" in r.output
    r = run("plan", "--db", str(groups_db), "--target-useful-hit-ratio", "0.3", "--family", "nope")
    assert r.exit_code == 2 and "no such prompt family" in r.output


def test_pool_too_small_for_the_curve_falls_back_to_replay(mixed_db):
    # 50 blocks cannot hold the longest request: the curve does not apply, the point replays.
    (sweep,) = run_sweeps("vllm-default", FA64, ["num_blocks=50,5000"], db_path=mixed_db)
    assert [p.one_pass for p in sweep.points] == [False, True]
    policy = make_policy({"groups": ["full_attention"], "block_size": 64, "num_blocks": 50})
    separate = run_replay(policy, db_path=mixed_db)
    assert separate.num_errors > 0
    q = "SELECT sum(hit_tokens), count(error) FROM replay_requests WHERE run_id = {}"
    assert db_rows(mixed_db, q.format(sweep.points[0].run_id)) == db_rows(
        mixed_db, q.format(separate.run_id)
    )


def test_plan_says_its_schedule_and_plans_under_load(groups_db):
    serial = plan(0.2, db_path=groups_db)
    loaded = plan(0.2, db_path=groups_db, schedule="concurrent", time_scale=0.001)
    assert (serial.schedule, loaded.schedule) == ("serial", "concurrent")
    assert loaded.reachable and serial.reachable
    # In flight together, the requests pin blocks: the cheapest pool is no smaller.
    assert loaded.candidates[0].cost >= serial.candidates[0].cost
    r = run("plan", "--db", str(groups_db), "--target-useful-hit-ratio", "0.3")
    assert r.output.startswith("schedule: serial (each request after the previous one")
    r = run("plan", "--db", str(groups_db), "--target-useful-hit-ratio", "0.3", "--time-scale", "2")
    assert r.exit_code == 2
    assert "policy key 'time_scale' needs schedule: concurrent" in r.output


def test_sweep_and_plan_measure_after_a_warm_up(mixed_db):
    """(issue 14, item 10: --measure-from was replay's only) Every request replays; the
    sweep's points and the plan's figures count those from floor(f x n) on, as replay does."""
    (sweep,) = run_sweeps(
        "vllm-default", FA64, ["num_blocks=500"], db_path=mixed_db, measure_from=0.5
    )
    (point,) = sweep.points
    q = (
        "SELECT sum(prompt_tokens), sum(hit_tokens) FROM replay_requests "
        f"WHERE run_id = {point.run_id} AND measured"
    )
    assert db_rows(mixed_db, q) == [(point.prompt_tokens, point.hit_tokens)]
    assert db_rows(
        mixed_db, f"SELECT count(*) FROM replay_requests WHERE run_id = {point.run_id}"
    ) == [(2_500,)]
    assert point.prompt_tokens < 3_557_670
    policy = make_policy({"groups": ["full_attention"], "block_size": 64, "num_blocks": 500})
    replayed = run_replay(policy, db_path=mixed_db, measure_from=0.5)
    summary = replayed.summary.to_pylist()
    assert sum(r["hit_tokens"] for r in summary) == point.hit_tokens


def test_plan_measures_after_a_warm_up(groups_db):
    from analyzer.access.trace import load_trace
    from analyzer.pipeline.plan import Evaluator as _Evaluator
    from analyzer.store.db import connect

    con = connect(groups_db, create=False)
    try:
        trace = load_trace(con)
    finally:
        con.close()
    ev = _Evaluator(trace, None, measure_from=0.25)
    assert ev.mask.tolist() == [False] * 8 + [True] * 24
    out = run(
        "plan", "--db", str(groups_db), "--target-useful-hit-ratio", "0.3", "--model",
        "qwen3.5-4b", "--measure-from", "0.25",
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    bad = run(
        "plan", "--db", str(groups_db), "--target-useful-hit-ratio", "0.3", "--measure-from", "1"
    )
    assert bad.exit_code == 2 and "--measure-from" in bad.output


def test_a_concurrent_sweep_prints_each_points_ttft_and_queue(groups_db):
    """(issue 47 item 15: the table had no TTFT or queue column; SQL was needed)"""
    args = ["sweep", "--db", str(groups_db), "--set", "model=qwen3.5-4b", "--jobs", "1",
            "--set", "schedule=concurrent", "--set", "time_scale=0.01"]  # fmt: skip
    r = run(*args, "--vary", "num_blocks=20,40")
    assert r.exit_code == 0, r.output
    header = r.stdout.splitlines()[0].split()
    load = ["ttft_p50_s", "ttft_p99_s", "queue_mean_s", "queue_p99_s", "preemptions"]
    assert header[-6:] == ["one_pass", *load]
    q = (
        "SELECT quantile_cont(ttft_s, 0.5), quantile_cont(ttft_s, 0.99), avg(queue_s), "
        "quantile_cont(queue_s, 0.99), sum(num_preemptions) FROM replay_requests "
        "WHERE run_id = {} AND measured"
    )
    for line, run_id in zip(r.stdout.splitlines()[2:4], (1, 2), strict=True):
        cells = line.split()
        assert int(cells[3]) == run_id
        (want,) = db_rows(groups_db, q.format(run_id))
        assert [float(c.replace(",", "")) for c in cells[-5:]] == pytest.approx(
            [float(w) for w in want], abs=5e-4
        )
    serial = run("sweep", "--db", str(groups_db), "--set", "model=qwen3.5-4b", "--jobs", "1",
                 "--vary", "num_blocks=20,40")  # fmt: skip
    assert serial.exit_code == 0 and serial.stdout.splitlines()[0].split()[-1] == "one_pass"


@pytest.mark.parametrize("flag", ["--jobs", "--workers"])
def test_no_workers_is_refused_by_either_name(tmp_path, flag):
    """(`--jobs 0` said `Error: --workers 0: ...`, a flag the user had not typed)"""
    args = ["sweep", "--db", str(tmp_path / "none.duckdb"), "--vary", "num_blocks=8", flag, "0"]
    result = CliRunner().invoke(cli, args, prog_name="hpa")
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        "Error: Invalid value for '--jobs' / '--workers': 0 is not in the range x>=1. ('hpa "
        "sweep --help' for help)"
    )
