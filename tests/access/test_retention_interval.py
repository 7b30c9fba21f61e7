"""A retention interval is whole blocks of the block the replay runs in, checked once that
block is known: on a hash-id trace the block the trace imposes (Mooncake's 512-token blocks
replay qwen3-next's 544 as 1,024, so 1024 is valid and 512 is not), on a token-id trace the
policy's own. `--set retention_interval=1024` was refused before the trace was read, against
the preset's 544; every command that takes --set now judges it by the replay's block."""

from __future__ import annotations

import json

import duckdb
import pytest
from click.testing import CliRunner

from analyzer.access.geometry import fit_policy
from analyzer.cli import cli
from analyzer.errors import ConfigError
from analyzer.sim.dispatch import make_policy
from tests.conftest import write_jsonl

QWEN = "qwen3-next-80b-a3b"


def _token_error(r: int, block: int = 544) -> str:
    return (
        f"policy key 'retention_interval': {r} must be a multiple of block_size {block} on a "
        "model with a sparse group"
    )


def _trace_error(r: int, trace_block: int, block: int, nearest: str) -> str:
    return (
        f"policy key 'retention_interval': {r} is not whole {block:,}-token blocks, the blocks "
        f"this trace replays in (its blocks are {trace_block:,} tokens, so block_size 544 -> "
        f"{block:,}); give a multiple of {block:,} (e.g. {nearest}), or 0 or null"
    )


ON_512 = _trace_error(512, 512, 1024, "1,024 or 2,048")  # Mooncake's blocks, 512 asked

# (retention_interval with the qwen3-next preset, the trace's blocks (None: token ids),
# the error; None: replayed as asked)
FITTED = [
    (1088, None, None),
    (1024, None, _token_error(1024)),  # token ids: the policy's own block, as before
    (1000, None, _token_error(1000)),
    (1024, 512, None),  # the block the trace imposes, 1,024, not the preset's 544
    (2048, 512, None),
    (512, 512, ON_512),
    (1088, 512, _trace_error(1088, 512, 1024, "1,024 or 2,048")),  # whole 544s, not 1,024s
    (4608, 64, None),  # 8 x 576, without --set block_size=576
    (4352, 64, _trace_error(4352, 64, 576, "4,032 or 4,608")),
    (1088, 16, None),  # 544 is 34 blocks of 16: the block stays
    (1024, 16, _token_error(1024)),
]


@pytest.mark.parametrize(("retention", "trace_block", "error"), FITTED)
def test_the_interval_is_judged_by_the_block_the_replay_runs_in(retention, trace_block, error):
    policy = make_policy({"model": QWEN, "retention_interval": retention})  # no early refusal
    if error is None:
        fitted, _ = fit_policy(policy, trace_block)
        assert fitted.retention_interval == retention
        assert retention % fitted.block_size == 0
        return
    with pytest.raises(ConfigError) as info:
        fit_policy(policy, trace_block)
    assert str(info.value) == error


def _records(kind: str) -> list[dict]:
    """Twelve requests 0.5 s apart with observed TTFT: token ids, or 512-token hash blocks
    (Mooncake's kind), sharing their first two blocks."""
    out = []
    for i in range(12):
        prompt = (
            {"prompt_token_ids": list(range(1, 1025)) + [2000 + i] * 476}
            if kind == "tokens"
            else {"block_hash_ids": [1, 2, 3 + i % 3], "block_size": 512, "prompt_tokens": 1500}
        )
        timing = {"timestamp": i * 0.5, "output_tokens": 4, "ttft_ms": 60.0 + 10 * (i % 3)}
        out.append({"request_id": f"r{i}", **prompt, **timing})
    return out


@pytest.fixture(scope="module")
def dbs(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("retention")
    made = {}
    for kind in ("tokens", "hashes"):
        db = str(folder / f"{kind}.duckdb")
        trace = write_jsonl(folder / f"{kind}.jsonl", _records(kind))
        assert CliRunner().invoke(cli, ["ingest", str(trace), "--db", db]).exit_code == 0
        made[kind] = db
    return made


LATENCY = ["--target-useful-hit-ratio", "0.01", "--schedule", "concurrent", "--ttft-p99", "100"]
PLAN = ["plan", *LATENCY, "--model", QWEN]
# (command before --db, the trace, retention_interval, the error line; None: it runs)
COMMANDS = [
    (["replay"], "tokens", 1088, None),
    (["replay"], "tokens", 1024, _token_error(1024)),
    (["replay"], "hashes", 1024, None),
    (["replay"], "hashes", 2048, None),
    (["replay"], "hashes", 512, ON_512),
    (["calibrate"], "hashes", 2048, None),
    (["calibrate"], "hashes", 512, ON_512),
    (["calibrate"], "tokens", 1024, _token_error(1024)),
    (PLAN, "hashes", 1024, None),
    (PLAN, "hashes", 512, ON_512),
    (PLAN, "tokens", 1024, _token_error(1024)),
]


@pytest.mark.parametrize(("command", "kind", "retention", "error"), COMMANDS)
def test_every_command_judges_the_interval_by_the_replays_block(
    dbs, command, kind, retention, error
):
    args = [*command, "--db", dbs[kind], "--set", f"model={QWEN}"]
    result = CliRunner().invoke(cli, [*args, "--set", f"retention_interval={retention}"])
    if error is None:
        assert result.exit_code in (0, 1), result.output  # plan: 1 when unreachable
        assert "Error" not in result.stderr and "Traceback" not in result.output
    else:
        assert (result.exit_code, result.stderr) == (2, f"Error: {error}\n")


def test_probe_checks_the_policys_own_block(tmp_path):
    """(its requests are token ids: the policy's block, as before)"""
    out = tmp_path / "probe"
    args = ["probe", "--set", f"model={QWEN}", "--set", "retention_interval=1024", "--out", out]
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert (result.exit_code, result.stderr) == (2, f"Error: {_token_error(1024)}\n")
    assert not out.exists()


SWEEPS = [
    ("hashes", "0,1024,2048", None),
    ("hashes", "0,512", ON_512),
    ("tokens", "0,1088", None),
    ("tokens", "0,1024", _token_error(1024)),
]


@pytest.mark.parametrize(("kind", "values", "error"), SWEEPS)
def test_a_sweep_over_intervals_replays_and_stores_each_as_asked(dbs, kind, values, error):
    db = dbs[kind]
    before = _stored(db)
    args = ["sweep", "--db", db, "--set", f"model={QWEN}", "--vary", f"retention_interval={values}"]
    result = CliRunner().invoke(cli, args)
    if error is not None:
        assert (result.exit_code, result.stderr) == (2, f"Error: {error}\n")
        assert _stored(db) == before  # no point replayed
        return
    assert result.exit_code == 0, result.output
    asked = [int(v) for v in values.split(",")]
    assert _stored(db)[len(before) :] == [(str(v), v) for v in asked]


def _stored(db: str) -> list[tuple[str, int]]:
    """(the sweep table's value, the interval the run replayed) of every sweep point."""
    con = duckdb.connect(db, read_only=True)
    try:
        if not con.execute(
            "select count(*) from information_schema.tables where table_name = 'sweep_points'"
        ).fetchone()[0]:
            return []
        rows = con.execute(
            "select p.value, r.policy from sweep_points p join replay_runs r using (run_id) "
            "order by r.run_id"
        ).fetchall()
    finally:
        con.close()
    return [(v, json.loads(p)["retention_interval"]) for v, p in rows]


def test_several_policies_are_fitted_before_any_replays(dbs, tmp_path, monkeypatch):
    """`hpa replay --policy a,b`: b, which the trace's blocks cannot express (1088 is whole
    544s, not the 1,024s the hash trace replays in), is refused before a's replay runs."""
    from analyzer.pipeline import replay as pipeline_replay

    replayed = []
    real = pipeline_replay.replay_rows
    monkeypatch.setattr(
        pipeline_replay, "replay_rows", lambda *a, **k: replayed.append(1) or real(*a, **k)
    )
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"model": QWEN}))
    b.write_text(json.dumps({"model": QWEN, "retention_interval": 1088}))
    args = ["replay", "--db", dbs["hashes"], "--policy", f"{a},{b}"]
    result = CliRunner().invoke(cli, args)
    error = _trace_error(1088, 512, 1024, "1,024 or 2,048")
    assert (result.exit_code, result.stderr, replayed) == (2, f"Error: {error}\n", [])
    result = CliRunner().invoke(cli, ["replay", "--db", dbs["hashes"], "--policy", f"{a},{a}"])
    assert result.exit_code == 0 and len(replayed) == 2, result.output
