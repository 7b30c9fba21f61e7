"""Engine marconi end to end: `run_replay` on a sample trace (the waterfall holds) and
`hpa replay --policy a,b` side by side."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import load_policy
from analyzer.store.ingest import ingest
from tests.conftest import db_rows as rows
from tests.sim.engine_checks import waterfall_totals

SAMPLES = Path(__file__).parents[3] / "sample_traces"


@pytest.mark.parametrize(
    "overrides",
    [[], ["num_blocks=1000", "marconi_alpha=0.5"], ["num_blocks=1000", "marconi_bootstrap=1"]],
)
def test_waterfall_holds_on_the_mixed_sample(mixed_db, overrides):
    policy = load_policy("marconi-default", ["model=qwen3-next-80b-a3b", *overrides])
    run_id = run_replay(policy, db_path=mixed_db).run_id
    total, hits, bad = waterfall_totals(mixed_db, run_id)
    assert total == 2500 and hits > 0 and bad == 0


def test_cli_side_by_side_with_sglang(tmp_path):
    db = tmp_path / "d.duckdb"
    ingest([SAMPLES / "diagnostic_1088.jsonl"], db_path=db)
    result = CliRunner().invoke(
        cli,
        ["replay", "--db", str(db), "--policy", "sglang-default,marconi-default",
         "--set", "block_size=544"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    table = result.output.split("side by side (measured requests):")[1].strip().splitlines()
    # Three prompts sharing 1088 tokens: Marconi's second request checkpoints the branch
    # point, so the third hits it; so does SGLang's default extra_buffer (its branch point).
    assert table[2].split()[:5] == ["sglang-default", "1", "6,528", "1,088", "1,088"]
    assert table[3].split()[:5] == ["marconi-default", "2", "6,528", "1,088", "1,088"]


def test_cli_prints_the_tuned_alpha(tmp_path):
    """A bounded Marconi pool with alpha auto: `hpa replay` prints each partition's choice,
    and replay_requests.note keeps it."""
    db = tmp_path / "m.duckdb"
    ingest([SAMPLES / "mixed.jsonl.gz"], db_path=db)
    result = CliRunner().invoke(
        cli,
        ["replay", "--db", str(db), "--policy", "marconi-default",
         "--set", "model=qwen3-next-80b-a3b", "--set", "num_blocks=600"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note: replica ")]
    assert notes and all("marconi_alpha auto chose " in line for line in notes)
    stored = rows(db, "SELECT count(*) FROM replay_requests WHERE note IS NOT NULL")
    assert stored == [(len(notes),)]
