"""`hpa plan --window START..END` (issue 47 item 1): the plan measures one time window's
requests, after the requests before it as warm-up, as `hpa compare --window` selects them;
compare's eviction lever prints a plan command that runs as printed."""

from __future__ import annotations

import json
import random
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.pipeline.plan import plan
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from tests.conftest import write_jsonl

MODEL = "qwen3-next-80b-a3b"


def growing_prompts(path: Path) -> Path:
    """Four conversations sent round robin: 1,103-token prompts for 0..46 s, then 3,303-token
    ones at 100..146 s."""
    records = []
    for window, (length, start) in enumerate([(1100, 0.0), (3300, 100.0)]):
        prefixes = [
            [random.Random(10 * k + window).randrange(1000, 100_000) for _ in range(length)]
            for k in range(4)
        ]
        for i in range(24):
            records.append(
                {
                    "request_id": f"w{window}-{i}",
                    "timestamp": start + 2.0 * i,
                    "prompt_family": f"c{i % 4}",
                    "prompt_token_ids": prefixes[i % 4] + [7, i, 9],
                    "output_tokens": 1,
                }
            )
    db = path / "g.duckdb"
    ingest([write_jsonl(path / "g.jsonl", records)], db_path=db)
    return db


@pytest.fixture(scope="module")
def grown(tmp_path_factory) -> Path:
    return growing_prompts(tmp_path_factory.mktemp("window"))


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_a_window_is_planned_for_its_own_requests(grown):
    before = plan(0.8, db_path=grown, model=MODEL, window="..100")
    after = plan(0.8, db_path=grown, model=MODEL, window="100..")
    whole = plan(0.8, db_path=grown, model=MODEL)
    # the longer prompts of the window need more pool than those before it (42 blocks
    # against 25); the window is measured alone (its ratio is not the whole trace's)
    assert before.reachable and after.reachable
    assert (before.best.num_blocks, after.best.num_blocks, whole.best.num_blocks) == (25, 42, 42)
    assert after.best.useful_hit_ratio == pytest.approx(0.82349, abs=1e-5)
    assert whole.best.useful_hit_ratio == pytest.approx(0.82312, abs=1e-5)


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (
            ["--window", "0-3"],
            "Error: bad window '0-3': expected START..END in seconds of the trace's "
            "timestamps or RFC 3339, e.g. 0..300\n",
        ),
        (
            ["--window", "500.."],
            "Error: window 500.. holds no requests (their timestamps span 0..146 s)\n",
        ),
        (
            ["--window", "100..", "--dataset", "d"],
            "Error: --window selects the database's requests by time; not with --dataset\n",
        ),
    ],
)
def test_window_errors_are_one_line(grown, args, text):
    said = run("plan", "--db", grown, "--target-useful-hit-ratio", "0.8", *args)
    assert said.exit_code == 2, said.output
    assert said.stderr == text


def test_compares_eviction_lever_runs_as_printed(tmp_path, monkeypatch):
    """(issue 47 item 1: `hpa plan --target-useful-hit-ratio 0.926` without --db and --model,
    sizing the whole trace)"""
    monkeypatch.chdir(tmp_path)
    db = growing_prompts(Path("."))
    run_replay(
        make_policy({"model": MODEL, "retention_interval": None, "num_blocks": 30}), db_path=db
    )
    said = run("compare", "--db", "g.duckdb", "--window", "100..", "--baseline", "..100")
    assert said.exit_code == 0, said.output
    sentence = said.stdout.splitlines()[-1]
    command = sentence.split("`")[1]
    assert command == (  # the run's retention (null) is not the preset's: carried over
        f"hpa plan --db g.duckdb --model {MODEL} --window 100.. --set retention_interval=null "
        "--target-useful-hit-ratio 0.822"
    )
    # a plan this small (at most 1 M prompt tokens replayed) is run, its answer said
    assert "ratio again (42 blocks, 0.52 GiB a cache: 0.823 by its replays);" in sentence
    words = shlex.split(command)
    planned = run(*words[1:])
    assert planned.exit_code == 0, planned.output
    assert "num_blocks=42 -> useful hit ratio 0.823" in planned.stdout


@pytest.mark.parametrize(
    ("values", "carried"),
    [
        ({"model": MODEL, "num_blocks": 30}, []),  # the pool is what the plan searches
        ({"model": MODEL, "retention_interval": None}, [("retention_interval", "null")]),
        (
            {"model": MODEL, "schedule": "concurrent", "max_num_seqs": 8},
            [("schedule", "concurrent"), ("max_num_seqs", "8")],
        ),
        ({"block_size": 64}, [("block_size", "64")]),  # no model: the plan needs the block
    ],
)
def test_the_printed_plan_carries_the_runs_configuration(values, carried):
    """Keys the run set away from its model's defaults are `--set` on the printed plan."""
    from analyzer.pipeline.compare import plan_overrides

    run_policy = json.loads(make_policy(values).to_json())
    got = [(k, v) for k, v in plan_overrides(run_policy) if k != "async_scheduling"]
    assert sorted(got) == sorted(carried)
