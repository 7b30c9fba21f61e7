"""The geometry a hash-id trace can express (issue 14, items 1 and 2): every command
replays the nearest one, prices memory at its pages and says so; nothing aborts."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from analyzer.access.geometry import fit_policy
from analyzer.cli import cli
from analyzer.config.bundled import SCHEMAS
from analyzer.config.engines import engine
from analyzer.config.memory import bytes_per_block
from analyzer.errors import ConfigError
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy, policy_values
from analyzer.store.db import trace_block_tokens
from analyzer.store.ingest import ingest

EXTERNAL = Path(__file__).parents[1] / "fixtures" / "external"
QWEN = "qwen3-next-80b-a3b"
SAME = {}

# (policy keys, trace block tokens, the keys the fitted policy changes; SAME: none)
FITS = [
    ({"model": QWEN}, 512, {"block_size": 1024}),  # up: a Mamba state needs >= 544
    ({"model": QWEN}, 64, {"block_size": 576}),
    ({"model": QWEN}, 16, SAME),  # 544 is 34 blocks of 16
    ({"model": QWEN}, None, SAME),  # token ids: never changed
    ({"model": QWEN, "prefix_match_unit": 136}, 64, {"block_size": 576, "prefix_match_unit": 64}),
    ({"model": QWEN, "prefix_match_unit": 136}, 16, {"prefix_match_unit": 32}),  # 16k | 544
    ({"model": QWEN, "prefix_match_unit": 272}, 16, SAME),
    ({"model": QWEN, "retention_interval": 9792}, 64, {"block_size": 576}),  # 17 x 576
    ({"block_size": 16, "groups": ["full_attention"]}, 512, {"block_size": 512}),
]


@pytest.mark.parametrize(("keys", "trace_block", "changes"), FITS)
def test_the_nearest_geometry_the_trace_can_express(keys, trace_block, changes):
    policy = make_policy(keys)
    fitted, note = fit_policy(policy, trace_block)
    assert fitted == make_policy({**keys, **changes})
    if changes is SAME:
        assert note is None
    else:
        assert note.startswith(f"the trace's blocks are {trace_block:,} tokens, so the replay")
        assert note.endswith(f"memory is priced at {fitted.block_size:,}-token pages)")
        # the note names what changed, and only that ("block_size 544 -> 544" was named)
        assert ("block_size " in note) == ("block_size" in changes), note


def test_a_retention_interval_the_fitted_block_would_change_is_refused():
    """(pass over WEKA, item 1: 4352 was accepted, replayed as 4,608 and the sweep table
    still showed 4352): the error names the block the trace forces and valid multiples."""
    with pytest.raises(ConfigError) as info:
        fit_policy(make_policy({"model": QWEN, "retention_interval": 4352}), 64)
    assert str(info.value) == (
        "policy key 'retention_interval': 4352 is not whole 576-token blocks, the blocks "
        "this trace replays in (its blocks are 64 tokens, so block_size 544 -> 576); give a "
        "multiple of 576 (e.g. 4,032 or 4,608), or 0 or null"
    )
    asked = make_policy({"model": QWEN, "block_size": 576, "retention_interval": 4608})
    assert fit_policy(asked, 64) == (asked, None)  # as asked, replayed as asked
    fitted, _ = fit_policy(make_policy({"model": QWEN, "retention_interval": 4608}), 64)
    assert fitted == asked  # without block_size=576: the interval is judged by 576 alone


def test_sweep_replays_and_shows_the_retention_asked_or_refuses(tmp_path):
    db = str(tmp_path / "t.duckdb")
    run = CliRunner().invoke
    assert run(cli, ["ingest", str(TRACES["weka"][0]), "--db", db]).exit_code in (0, 1)
    base = ["sweep", "--db", db, "--set", f"model={QWEN}"]
    refused = run(cli, [*base, "--vary", "retention_interval=0,4352"])
    assert refused.exit_code != 0 and "e.g. 4,032 or 4,608" in refused.output
    assert "Traceback" not in refused.output
    swept = run(cli, [*base, "--set", "block_size=576", "--vary", "retention_interval=0,4608"])
    assert swept.exit_code == 0, swept.output
    con = duckdb.connect(db, read_only=True)
    stored = con.execute(
        "select p.value, r.policy from sweep_points p join replay_runs r using (run_id) "
        "order by r.run_id"
    ).fetchall()
    con.close()
    assert [(v, json.loads(p)["retention_interval"]) for v, p in stored] == [
        ("0", 0),
        ("4608", 4608),
    ]


def test_trace_block_is_the_lcm_of_the_hash_id_requests():
    assert trace_block_tokens([None, None]) is None
    assert trace_block_tokens([512, None, 512]) == 512
    assert trace_block_tokens([16, 64]) == 64


def test_memory_follows_the_block_and_no_block_is_below_the_presets():
    assert bytes_per_block(QWEN) == 13_369_344
    assert bytes_per_block(QWEN, 1088) == 2 * 13_369_344
    assert bytes_per_block(QWEN, 1024) == 13_369_344 * 1024 // 544
    with pytest.raises(ConfigError) as info:
        make_policy({"model": QWEN, "block_size": 512})
    assert str(info.value) == (
        "policy key 'block_size': 512 is below qwen3-next-80b-a3b's smallest block, 544 "
        "tokens (a Mamba state must fit in one page)"
    )
    make_policy({"model": QWEN, "block_size": 512, "groups": ["full_attention"]})  # no state


TRACES = {
    "mooncake": (EXTERNAL / "mooncake" / "conversation_trace_head40.jsonl", 512, "1,024"),
    "weka": (EXTERNAL / "weka_claude_code" / "trace_0021.json.gz", 64, "576"),
}


@pytest.mark.parametrize("name", list(TRACES))
def test_replay_sweep_and_plan_run_on_a_hash_id_trace(tmp_path, name):
    path, trace_block, block = TRACES[name]
    db = str(tmp_path / "t.duckdb")
    run = CliRunner().invoke
    assert run(cli, ["ingest", str(path), "--db", db]).exit_code in (0, 1)
    said = f"note: the trace's blocks are {trace_block} tokens, so the replay matches in whole"
    changed = f"block_size 544 -> {block}"
    replay = run(cli, ["replay", "--db", db, "--set", f"model={QWEN}"])
    assert replay.exit_code == 0, replay.output
    assert said in replay.output and changed in replay.output
    assert f'"block_size":{block.replace(",", "")}' in replay.output
    sweep = run(cli, ["sweep", "--db", db, "--set", f"model={QWEN}", "--vary", "num_blocks=50,100"])
    assert sweep.exit_code == 0, sweep.output
    assert said in sweep.output
    plan = run(cli, ["plan", "--db", db, "--target-useful-hit-ratio", "0.01", "--model", QWEN])
    assert plan.exit_code in (0, 1), plan.output  # 1: unreachable, said in one line
    assert said in plan.output
    if plan.exit_code == 0:  # the candidates were searched
        assert "(a quarter block) not searched" in plan.output
    assert "Traceback" not in plan.output
    args = ["plan", "--db", db, "--target-useful-hit-ratio", "0.01", "--model", QWEN]
    answer = json.loads(run(cli, [*args, "--format", "json"]).output)
    assert answer["block_size"] == int(block.replace(",", ""))  # a replay of the answer needs it


def test_plan_takes_policy_and_set_and_a_model_file(tmp_path):
    """(issue 14, item 1: plan had no --policy/--set and refused a model JSON path)"""
    db = str(tmp_path / "t.duckdb")
    run = CliRunner().invoke
    trace = EXTERNAL / "tracelab" / "round_trace.sanitized.jsonl"
    assert run(cli, ["ingest", str(trace), "--db", db]).exit_code == 0
    model = tmp_path / "my-model.json"
    preset = json.loads((SCHEMAS / "models" / f"{QWEN}.json").read_text())
    model.write_text(json.dumps({**preset, "name": "my-model"}))
    target = ["--target-useful-hit-ratio", "0.3"]
    by_file = run(cli, ["plan", "--db", db, *target, "--model", str(model)])
    by_name = run(cli, ["plan", "--db", db, *target, "--model", QWEN])
    assert by_file.exit_code == by_name.exit_code == 0, by_file.output
    assert by_file.output.splitlines()[-1] == by_name.output.splitlines()[-1]
    by_set = run(
        cli, ["plan", "--db", db, *target, "--policy", "sglang-default", "--set", f"model={QWEN}"]
    )
    assert by_set.exit_code == 0, by_set.output
    assert by_set.output.splitlines()[-1] != by_name.output.splitlines()[-1]  # another engine
    replay = run(cli, ["replay", "--db", db, "--set", f"model={model}"])
    assert replay.exit_code == 0, replay.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"block_size": 0, "groups": ["full_attention"]}')
    refused = run(cli, ["replay", "--db", db, "--set", f"model={bad}"])
    assert refused.exit_code == 2
    assert (
        refused.output.strip() == f"Error: model file {bad}: 'block_size' must be an integer >= 1"
    )
    # without num_groups: one KV-cache group a type (a traceback before); a bad one refused
    bare = tmp_path / "bare.json"
    bare.write_text('{"block_size": 16, "groups": ["full_attention", "mamba"]}')
    assert run(cli, ["replay", "--db", db, "--set", f"model={bare}"]).exit_code == 0
    bare.write_text('{"block_size": 16, "groups": ["full_attention"], "num_groups": {"x": 1}}')
    refused = run(cli, ["replay", "--db", db, "--set", f"model={bare}"])
    assert (refused.exit_code, refused.output.strip()) == (
        2,
        f"Error: model file {bare}: 'num_groups' must map each of its groups to an integer >= 1",
    )


ENGINE_PRESETS = [
    "vllm-default",
    "sglang-default",
    "marconi-default",
    "trtllm-default",
    "llamacpp-default",
    "suffix_replay-default",
    "attention-only",
    "oracle",
]


@pytest.mark.parametrize("preset", ENGINE_PRESETS)
def test_every_engine_preset_takes_a_mamba_model(preset):
    """The smallest-block rule is vLLM's (one page holds a state); TRT-LLM's 32-token and
    llama.cpp's 1-token blocks with Qwen3-Next are fine."""
    values = {**policy_values(preset, ()), "model": QWEN}
    make_policy(values)


@pytest.fixture(scope="module")
def ragpulse(tmp_path_factory) -> str:
    db = tmp_path_factory.mktemp("rp") / "rp.duckdb"
    ingest([EXTERNAL / "ragpulse" / "0_trace.jsonl"], db_path=db)
    return str(db)


def _evicted_and_granularity(db: str, run_id: int) -> tuple[int, int]:
    con = duckdb.connect(db, read_only=True)
    try:
        ((evicted, granularity),) = con.execute(
            "SELECT sum(lost_eviction_tokens), sum(lost_granularity_tokens) "
            "FROM replay_requests WHERE run_id = ?",
            [run_id],
        ).fetchall()
    finally:
        con.close()
    return evicted, granularity


@pytest.mark.parametrize("preset", ENGINE_PRESETS)
def test_an_unbounded_pool_evicts_nothing(ragpulse, preset):
    """(issue 14, item 3: 13.8% of RAGPulse's tokens were 'lost to dense eviction' in an
    unbounded pool: the partial block a 136-token match unit leaves uncached)"""
    values = {**policy_values(preset, ()), "model": QWEN}
    if preset == "vllm-default":
        values["prefix_match_unit"] = 136
    outcome = run_replay(make_policy(values), db_path=ragpulse)
    evicted, granularity = _evicted_and_granularity(ragpulse, outcome.run_id)
    if engine(values.get("engine", "vllm")).keeps_computed:
        assert evicted == 0
    else:  # llama.cpp: a slot's next request overwrites its cache
        assert evicted > 0
    if preset == "vllm-default":
        assert granularity == 27_744  # 4,488 below the unit + 23,256 of partial blocks


@pytest.mark.parametrize(("num_blocks", "evicts"), [(100_000, False), (40, True)])
def test_a_bounded_pool_counts_as_eviction_only_what_was_evicted(ragpulse, num_blocks, evicts):
    """A pool that never fills: the same waterfall as an unbounded one (the partial blocks a
    136-token unit leaves uncached are granularity); a small pool: eviction appears, and a
    request's eviction is at most what full attention ever cached beyond what it held."""
    values = {"block_size": 544, "prefix_match_unit": 136, "model": QWEN}
    outcome = run_replay(make_policy({**values, "num_blocks": num_blocks}), db_path=ragpulse)
    evicted, granularity = _evicted_and_granularity(ragpulse, outcome.run_id)
    if evicts:
        assert evicted > 0
    else:
        assert (evicted, granularity) == (0, 27_744)  # as unbounded (the test above)


def test_plan_says_what_the_geometry_loses_and_why_a_pool_is_its_size(ragpulse):
    """(issue 14, item 5: RAGPulse's ceiling 0.149 hid that 31% is shared, half of it
    lost to 544-token blocks, and every candidate was the smallest pool, unsaid)"""
    run = CliRunner().invoke
    args = ["plan", "--db", ragpulse, "--model", QWEN, "--target-useful-hit-ratio"]
    found = run(cli, [*args, "0.1"])
    assert found.exit_code == 0, found.output
    # the ceilings of the best match unit searched (issue 45: a quarter block, 136 tokens)
    assert (
        "ceilings: shared prefix 0.292 at token level, 0.267 in whole blocks or match units "
        "(the geometry loses 0.025)" in found.output
    )
    assert "sized_by" in found.output  # (the floor is 17 blocks, the target needs 22)
    missed = run(cli, [*args, "0.6"])
    assert missed.exit_code == 1
    assert (
        "the best match unit searched, match units of 136 tokens (the other match units "
        "searched: 544 (the block) 0.137)" in missed.output
    )
    assert (
        "0.292 is shared at token level, 0.025 of it below whole match units of 136 tokens"
        in missed.output
    )


def test_plan_writes_null_and_sweep_takes_workers(ragpulse):
    """(issue 14, item 10: plan printed null as a blank cell; sweep had --jobs where every
    other command has --workers)"""
    run = CliRunner().invoke
    planned = run(
        cli, ["plan", "--db", ragpulse, "--model", QWEN, "--target-useful-hit-ratio", "0.1"]
    )
    rows = [line.split() for line in planned.output.splitlines() if " trace " in line]
    assert ["null", "null"] in [r[:2] for r in rows] and ["0", "null"] in [r[:2] for r in rows]
    swept = run(
        cli,
        [
            "sweep",
            "--db",
            ragpulse,
            "--set",
            f"model={QWEN}",
            "--workers",
            "1",
            "--vary",
            "num_blocks=64",
        ],
    )
    assert swept.exit_code == 0, swept.output


def test_calibrate_fits_the_geometry_too(tmp_path):
    """A hash-id trace with observed TTFT (WEKA's kind) calibrates under a 544 preset."""
    from tests.conftest import write_jsonl

    records = [
        {
            "request_id": f"r{i}",
            "timestamp": i * 0.5,
            "block_hash_ids": [1, 2, 3 + i % 3],
            "block_size": 512,
            "prompt_tokens": 1500,
            "output_tokens": 4,
            "ttft_ms": 60.0 + 10 * (i % 3),
        }
        for i in range(12)
    ]
    db = str(tmp_path / "c.duckdb")
    run = CliRunner().invoke
    assert (
        run(cli, ["ingest", str(write_jsonl(tmp_path / "t.jsonl", records)), "--db", db]).exit_code
        == 0
    )
    out = run(cli, ["calibrate", "--db", db, "--set", f"model={QWEN}"])
    assert out.exit_code == 0, out.output
    assert "note: the trace's blocks are 512 tokens" in out.output and "544 -> 1,024" in out.output
    assert out.output.count("fitted step_base_ms=") == 1


def test_a_directory_leaves_out_what_is_not_named_like_a_trace(tmp_path):
    run = CliRunner().invoke
    folder = EXTERNAL / "weka_claude_code"
    out = run(cli, ["ingest", str(folder), "--db", str(tmp_path / "w.duckdb")])
    assert out.exit_code == 0, out.output
    assert f"skipped {folder / 'SOURCE.md'}: not named like a trace file" in out.output
    # WEKA's conversations have no absolute start: the adapter makes one, and says so
    assert "note: timestamps of " in out.output and "(weka) are partly the adapter's" in out.output


def test_ragpulse_side_tables_are_read_by_its_trace_never_as_traces(tmp_path):
    """(issue 14, item 10: a side table ingested by mistake gave 6,898 rejects, no hint)"""
    run = CliRunner().invoke
    folder = EXTERNAL / "ragpulse"
    out = run(cli, ["ingest", str(folder), "--db", str(tmp_path / "r.duckdb")])
    assert out.exit_code == 0, out.output
    assert (
        f"skipped {folder / '2_passages.jsonl'}: a RAGPulse side table: 0_trace.jsonl reads it"
        in (out.output)
    )
    alone = run(cli, ["ingest", str(folder / "1_sys_prompt.jsonl"), "--db", str(tmp_path / "s")])
    assert alone.exit_code == 2
    assert alone.output.strip().endswith(
        "Error: nothing to ingest: "
        f"{folder / '1_sys_prompt.jsonl'}: a RAGPulse side table: 0_trace.jsonl reads it"
    )
    assert not (tmp_path / "s").exists()
    moved = tmp_path / "side.jsonl"  # away from its trace: read, every record rejected
    moved.write_bytes((folder / "1_sys_prompt.jsonl").read_bytes())
    out = run(cli, ["ingest", str(moved), "--db", str(tmp_path / "m.duckdb")])
    assert out.exit_code == 1
    assert "none of its records is a request in format jsonl: is it a trace of another" in (
        out.output
    )


def test_a_concurrent_replay_notes_adapter_made_timestamps(tmp_path):
    db = tmp_path / "w.duckdb"
    ingest([EXTERNAL / "weka_claude_code" / "trace_0021.json.gz"], db_path=db)
    out = CliRunner().invoke(
        cli, ["replay", "--db", str(db), "--policy", "vllm-concurrent", "--set", f"model={QWEN}"]
    )
    assert out.exit_code == 0, out.output
    assert "note: timestamps of " in out.output and "(weka) are partly the adapter's" in out.output


def test_the_geometry_is_fitted_before_the_trace_loads(tmp_path, monkeypatch):
    """(issue 14, item 10: the block-size check ran after an 8 s load on WEKA)"""
    import analyzer.pipeline.replay as replay_module
    from analyzer.access.inputs import StoredRequests

    db = tmp_path / "m.duckdb"
    ingest([EXTERNAL / "mooncake"], db_path=db)
    calls = []
    fit, load = replay_module.fit_policy, StoredRequests.driver_trace
    monkeypatch.setattr(replay_module, "fit_policy", lambda *a: calls.append("fit") or fit(*a))
    monkeypatch.setattr(
        StoredRequests, "driver_trace", lambda *a, **k: calls.append("load") or load(*a, **k)
    )
    outcome = run_replay(make_policy({"model": QWEN}), db_path=db)
    assert calls == ["fit", "load"]
    assert outcome.policy.block_size == 1024  # fitted to the 512-token blocks
