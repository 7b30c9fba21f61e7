"""`hpa plan`'s answers checked by replays: the floor is exact, the answer reaches the target
and 0.8x it does not; load figures; the JSON form; the errors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import orjson
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from analyzer.access.trace import load_trace
from analyzer.cli import cli
from analyzer.pipeline.plan import Evaluator, plan
from analyzer.pipeline.plan.answer import _seconds
from analyzer.pipeline.plan.evaluate import Targets
from analyzer.pipeline.plan.load import load_figures, max_overlap
from analyzer.sim.dispatch import make_policy
from analyzer.store.db import connect
from analyzer.store.ingest import ingest
from tests.conftest import write_jsonl

BLOCK = {"block_size": 16}  # no model: FA + Mamba (the default geometry) at 16-token blocks
PROPERTY = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _trace(tmp_path: Path, records: list[dict]) -> Path:
    db = tmp_path / "t.duckdb"
    if db.exists():
        db.unlink()
    ingest([write_jsonl(tmp_path / "t.jsonl", records)], db_path=db)
    return db


@st.composite
def traces(draw) -> list[dict]:
    """Requests sharing a few families' prefixes, with unique tails and short outputs."""
    num_families = draw(st.integers(1, 3))
    prefixes = [
        list(range(1000 * f, 1000 * f + draw(st.integers(8, 120)))) for f in range(num_families)
    ]
    records = []
    for i in range(draw(st.integers(6, 24))):
        family = draw(st.integers(0, num_families - 1))
        tail = list(range(100_000 + 500 * i, 100_000 + 500 * i + draw(st.integers(1, 90))))
        records.append(
            {
                "request_id": f"r{i}",
                "timestamp": float(i),
                "prompt_token_ids": prefixes[family] + tail,
                "output_tokens": draw(st.integers(0, 20)),
            }
        )
    return records


def _loaded(db: Path):
    con = connect(db, create=False)
    try:
        return load_trace(con)
    finally:
        con.close()


def _measure(db: Path, candidate, num_blocks: int, **keys):
    values = {**BLOCK, **candidate.setting(), "num_blocks": num_blocks, **keys}
    return Evaluator(_loaded(db), None).measure(make_policy(values))


def _found_floor_example() -> list[dict]:
    """Hypothesis found it: the heaviest requests alone fit 6 blocks, the trace needs 8 (a
    request hitting the shared 25-token prefix holds the hit and its state copies)."""
    shared = list(range(25))
    tails = [8, 1, 4, 1, 1, 1, 1, 8, 1, 2, 2, 2, 2]
    return [
        {
            "request_id": f"r{i}",
            "timestamp": float(i),
            "prompt_token_ids": shared + list(range(100000 + 500 * i, 100000 + 500 * i + n)),
            "output_tokens": 0,
        }
        for i, n in enumerate(tails)
    ]


def _floor_below_the_heaviest_example() -> list[dict]:
    """Found by a seed hunt: the heaviest requests together need 17 blocks (r13 hits the
    90-token prefix r11 left), the trace 16 (r12 runs between them and evicts it)."""
    rows = [(0, 11, 33, 1), (0, 11, 61, 5), (0, 11, 52, 5), (0, 11, 1, 10), (1000, 90, 1, 17),
            (0, 11, 23, 0), (0, 11, 32, 6), (0, 11, 83, 12), (1000, 90, 11, 7), (0, 11, 38, 1),
            (1000, 90, 1, 2), (1000, 90, 68, 3), (0, 11, 1, 19), (1000, 90, 90, 20),
            (0, 11, 87, 10), (0, 11, 10, 17), (0, 11, 14, 11), (1000, 90, 81, 1)]  # fmt: skip
    return [
        {
            "request_id": f"r{i}",
            "timestamp": float(i),
            "prompt_token_ids": list(range(first, first + shared))
            + list(range(100_000 + 500 * i, 100_000 + 500 * i + tail)),
            "output_tokens": outputs,
        }
        for i, (first, shared, tail, outputs) in enumerate(rows)
    ]


@PROPERTY
@given(records=traces(), share=st.floats(0.3, 1.0))
@example(records=_found_floor_example(), share=1.0)
@example(records=_floor_below_the_heaviest_example(), share=0.6510600810021621)
def test_a_replay_at_the_answer_reaches_the_target_and_at_0_8x_does_not(tmp_path, records, share):
    db = _trace(tmp_path, records)
    bound = plan(1.0, db_path=db, policy=BLOCK).attention_only_bound
    if bound < 0.001:
        return  # nothing shared at whole blocks: nothing to plan
    target = max(0.001, np.floor(share * bound * 1000) / 1000)  # at most the bound
    r = plan(target, db_path=db, policy=BLOCK)
    if not r.reachable:
        assert "unreachable within the search" in r.message  # (the model's groups miss it)
        return
    best = r.best
    at = _measure(db, best, best.num_blocks)
    assert at.schedulable and at.useful_hit_ratio >= target
    assert at.useful_hit_ratio == pytest.approx(best.useful_hit_ratio)
    below = int(0.8 * best.num_blocks)
    if below >= 2:
        assert not _measure(db, best, below).meets(Targets(target))
    # The floor is exact: every request schedules there, not one block below.
    assert _measure(db, best, best.floor_blocks).schedulable
    if best.floor_blocks > 2:
        assert not _measure(db, best, best.floor_blocks - 1).schedulable


@pytest.mark.parametrize("groups", [["full_attention"], ["full_attention", "mamba"]])
def test_the_floor_holds_under_load_too(tmp_path, groups):
    """A burst (every request in flight together) needs no more than each alone: requests
    wait or preempt; only one that does not fit alone is refused."""
    records = [
        {
            "request_id": f"r{i}",
            "timestamp": 0.0,
            "prompt_token_ids": list(range(160)) + list(range(1000 + 50 * i, 1040 + 50 * i + i)),
            "output_tokens": 30,
        }
        for i in range(12)
    ]
    db = _trace(tmp_path, records)
    keys = {**BLOCK, "groups": groups}
    r = plan(0.3, db_path=db, policy=keys, schedule="concurrent")
    assert r.reachable, r.message
    floor = r.best.floor_blocks
    loaded = {**keys, "schedule": "concurrent"}
    assert _measure(db, r.best, floor, **loaded).schedulable
    assert not _measure(db, r.best, floor - 1, **loaded).schedulable


@pytest.mark.parametrize(
    ("starts", "ends", "most"),
    [
        ([], [], 0),
        ([0.0], [1.0], 1),
        ([0.0, 1.0], [1.0, 2.0], 1),  # one finishes as the next arrives
        ([0.0, 0.5, 0.6], [1.0, 2.0, 0.7], 3),
        ([0.0, 0.0, 0.0, 5.0], [9.0, 1.0, 2.0, 6.0], 3),
    ],
)
def test_max_overlap(starts, ends, most):
    assert max_overlap(np.asarray(starts), np.asarray(ends)) == most


def _rows(queue: list[float]) -> dict:
    n = len(queue)
    arrival = [float(i) for i in range(n)]
    return {
        "arrival_s": arrival,
        "queue_s": queue,
        "ttft_s": [q + 0.1 for q in queue],
        "finished_s": [a + q + 0.2 for a, q in zip(arrival, queue, strict=True)],
        "replica": [None] * n,
    }


@pytest.mark.parametrize(
    ("queue", "saturated"),
    [
        ([0.0] * 8, False),  # keeps up
        ([0.5, 0.1, 0.9, 0.2, 0.4, 0.8, 0.3, 0.6], False),  # a queue that comes and goes
        ([float(i) for i in range(8)], True),  # grows with the trace
        ([0.0] * 6 + [0.4, 0.6], False),  # grows, but under a second
        ([3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 5.0, 5.0], False),  # long, not growing twofold
    ],
)
def test_saturation(queue, saturated):
    load = load_figures(_rows(queue), None)
    assert load.saturated is saturated
    assert load.queue_mean_s == pytest.approx(sum(queue) / len(queue))


def test_load_figures_are_none_for_a_serial_replay():
    rows = {**_rows([0.0]), "ttft_s": [None], "queue_s": [None]}
    assert load_figures(rows, None) is None


def test_a_plan_under_load_says_what_load_does(tmp_path):
    """A burst on one replica: TTFT and queueing figures, and the plan names the saturation;
    with --ttft-p99 the replica count is searched until the latency target is met."""
    prefix = list(range(200))
    records = [
        {
            "request_id": f"r{i}",
            "timestamp": i * 0.01,
            "prompt_token_ids": prefix + list(range(10_000 + 100 * i, 10_000 + 100 * i + 40)),
            "output_tokens": 200,
        }
        for i in range(40)
    ]
    db = _trace(tmp_path, records)
    keys = {**BLOCK, "groups": ["full_attention"], "max_num_seqs": 4}
    r = plan(0.5, db_path=db, policy=keys, schedule="concurrent")
    best = r.best
    assert best.load.saturated and best.load.max_in_flight == 40
    assert best.load.ttft_p99_s > best.load.ttft_p50_s > 1.0
    assert r.load_warning.startswith("saturated: the simulated server cannot keep up")
    assert "hpa calibrate" in r.load_warning
    quick = plan(0.5, db_path=db, policy=keys, schedule="concurrent", ttft_p99_s=3.0)
    assert quick.reachable and quick.best.replicas > 1
    # the same setting replayed and stored is saturated by the same figures (hpa replay's
    # load line and the report say so; they had no word for it)
    from analyzer.pipeline.replay import run_replay
    from analyzer.store.runs import load_figures as stored_load

    setting = {**keys, "schedule": "concurrent", "num_blocks": best.num_blocks}
    run_id = run_replay(make_policy(setting), db_path=db).run_id
    con = connect(db, create=False)
    try:
        stored = stored_load(con, run_id)
    finally:
        con.close()
    assert stored["saturated"] is True
    assert stored["queue_first_quarter_s"] == pytest.approx(best.load.queue_first_quarter_s)
    assert stored["queue_last_quarter_s"] == pytest.approx(best.load.queue_last_quarter_s)
    assert quick.best.load.ttft_p99_s <= 3.0
    m = _measure(db, quick.best, quick.best.num_blocks, **{**keys, "schedule": "concurrent"})
    assert m.meets(Targets(0.5, 3.0))
    assert m.load == quick.best.load
    never = plan(0.5, db_path=db, policy=keys, schedule="concurrent", ttft_p99_s=1e-6)
    assert not never.reachable  # below one step's time: no replica count meets it
    said = re.search(
        r"no fleet meets useful hit ratio 0.500, TTFT p99 <= 1e-06 s \(up to 64 replicas, "
        r"routers [a-z_, -]+\); the nearest: 64 replicas, (\w+) routing \(TTFT p99 ([\d.]+) "
        r"s, TPOT p99 [\d.]+ s, hit ratio (\d\.\d{3})\)",
        never.message,
    )
    assert said, never.message
    assert float(said[2]) > 1e-6  # what it missed by
    assert said[1] == "dynamo" and float(said[3]) >= 0.5  # one that reaches the hit target


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_plan_json(groups_db):
    r = run("plan", "--db", str(groups_db), "--target-useful-hit-ratio", "0.3", "--model",
            "qwen3.5-4b", "--format", "json")  # fmt: skip
    assert r.exit_code == 0, r.output
    answer = orjson.loads(r.output)
    assert {
        k: answer[k]
        for k in (
            "reachable",
            "block_size",
            "num_blocks",
            "caches",
            "sized_by",
            "replicas",
            "saturated",
        )  # fmt: skip
    } == {
        "reachable": True,
        "block_size": 528,  # the model's block (a token-ID trace needs no fitting)
        "num_blocks": 15,
        "caches": 1,
        "sized_by": "target",
        "replicas": 1,
        "saturated": None,
    }
    assert answer["total_gib"] == pytest.approx(answer["memory_gib"]) == 15 * 17_301_504 / 2**30
    assert answer["useful_hit_ratio"] == pytest.approx(25_344 / 70_400)
    assert answer["candidates"][0]["num_blocks"] == 15
    missed = run("plan", "--db", str(groups_db), "--target-useful-hit-ratio", "0.9",
                 "--format", "json")  # fmt: skip
    assert missed.exit_code == 1
    assert orjson.loads(missed.output)["reachable"] is False
    assert orjson.loads(missed.output)["num_blocks"] is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--ttft-p99", "2"], "Error: --ttft-p99 needs --schedule concurrent (a serial replay "
         "has no queue, so no latency to plan for)"),
        (["--ttft-p99", "0", "--schedule", "concurrent"],
         "Error: --ttft-p99 0.0: expected a number of seconds > 0"),
    ],
)  # fmt: skip
def test_plan_option_errors(groups_db, extra, message):
    r = run("plan", "--db", str(groups_db), "--target-useful-hit-ratio", "0.3", *extra)
    assert r.exit_code == 2
    assert r.output.strip().splitlines()[-1] == message


def test_plan_progress_on_a_pipe(groups_db, monkeypatch):
    import analyzer.cli.base

    monkeypatch.setattr(analyzer.cli.base, "PROGRESS_QUIET_S", 0.0)
    monkeypatch.setattr(analyzer.cli.base, "PROGRESS_LINE_S", 0.0)
    monkeypatch.setattr(analyzer.cli.base, "PROGRESS_HEARTBEAT_S", 1e9)
    r = CliRunner().invoke(
        cli,
        [
            "plan",
            "--db",
            str(groups_db),
            "--target-useful-hit-ratio",
            "0.3",
            "--model",
            "qwen3.5-4b",
        ],
    )
    assert r.exit_code == 0, r.output
    lines = r.stderr.splitlines()
    assert lines[0].startswith("plan: 0 replays, 0 s: ceiling retention_interval=null")
    assert any(": search: num_blocks=" in line for line in lines)
    assert any(": floor: num_blocks=" in line for line in lines)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (6999.107, "6,999"),
        (3.5407, "3.54"),
        (0.01234, "0.0123"),
        (1.22e-06, "under 0.001"),
        (0.0, "0"),
    ],  # fmt: skip
)
def test_seconds_are_said_without_an_exponent(value, said):
    assert _seconds(value) == said


def test_a_plan_without_a_model_says_it_counts_blocks(groups_db):
    """(issue 33 item 15: `hpa plan` without --model printed an empty memory_gib column,
    where `hpa replay` refuses)"""
    r = run("plan", "--db", str(groups_db), "--target-useful-hit-ratio", "0.2")
    assert r.exit_code == 0, r.output
    assert (
        "note: no --model: memory is counted in 544-token blocks, not GiB (a model preset "
        "prices a block); its block size is qwen3-next-80b-a3b's\n"
    ) in r.output
    assert "memory_gib" not in r.output and "total_blocks" in r.output
    own = run("plan", "--db", str(groups_db), "--target-useful-hit-ratio", "0.2", "--set",
              "block_size=64", "--set", 'groups=["full_attention"]')  # fmt: skip
    assert "note: no --model: memory is counted in 64-token blocks, not GiB (a model preset " \
        "prices a block)\n" in own.output  # fmt: skip
    priced = run("plan", "--db", str(groups_db), "--target-useful-hit-ratio", "0.2",
                 "--model", "qwen3-next-80b-a3b")  # fmt: skip
    assert "no --model" not in priced.output and "memory_gib" in priced.output


GROUPS_SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "groups_1500.jsonl"


def test_a_set_of_a_searched_key_is_said_to_be_left_out(tmp_path):
    """(`--set num_blocks=-1` and `--set routing=dynamo` were dropped in silence)"""
    db = tmp_path / "g.duckdb"
    ingest([GROUPS_SAMPLE], db_path=db)
    sets = [
        "--set",
        "num_blocks=-1",
        "--set",
        "routing=dynamo",
        "--set",
        "max_num_batched_tokens=4096",
    ]
    args = [
        "plan",
        "--db",
        str(db),
        "--target-useful-hit-ratio",
        "0.1",
        "--model",
        "qwen3.5-4b",
        *sets,
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "note: --set num_blocks=-1 is left out: the plan searches num_blocks itself",
        "note: --set routing=dynamo is left out: the plan searches routing itself",
    ]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("foo", "--routers 'foo': no such router; known: round_robin, session, least_loaded, "
         "prefix_aware, llm-d, dynamo, sglang, chwbl"),
        ("trace", "--routers trace: the trace's own replicas are not a fleet to size; searched "
         "routers: round_robin, session, least_loaded, prefix_aware, llm-d, dynamo, sglang, "
         "chwbl"),
    ],
)  # fmt: skip
def test_an_unknown_router_names_the_flag(tmp_path, name, message):
    """(it said `policy key 'routing': no router 'foo'; known: trace, ...`: a key the user had
    not set, and 'trace', which --routers refuses)"""
    args = ["plan", "--db", str(tmp_path / "none.duckdb"), "--target-useful-hit-ratio", "0.5",
            "--schedule", "concurrent", "--ttft-p99", "1", "--routers", name]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert (result.exit_code, result.output) == (2, f"Error: {message}\n")
