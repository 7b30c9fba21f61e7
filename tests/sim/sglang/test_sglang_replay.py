"""Engine sglang end to end: `run_replay` on a sample trace (the waterfall holds) and
`hpa replay --policy a,b` side by side."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import load_policy
from analyzer.store.ingest import ingest
from tests.sim.engine_checks import waterfall_totals

SAMPLES = Path(__file__).parents[3] / "sample_traces"


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["sglang_strategy=extra_buffer", "max_num_batched_tokens=2048"],
        ["num_blocks=3000", "sglang_num_states=40"],
        ["groups=full_attention,sliding_window", "sliding_window=1024", "num_blocks=2000"],
        [
            "groups=full_attention,sliding_window,mamba",
            "sliding_window=1024",
            "num_blocks=2000",
            "sglang_num_states=40",
            "sglang_strategy=extra_buffer",
            "max_num_batched_tokens=2048",
        ],
    ],
)
def test_waterfall_holds_on_the_mixed_sample(mixed_db, overrides):
    policy = load_policy("sglang-default", ["model=qwen3-next-80b-a3b", *overrides])
    run_id = run_replay(policy, db_path=mixed_db).run_id
    total, hits, bad = waterfall_totals(mixed_db, run_id)
    assert total == 2500 and hits > 0 and bad == 0


def test_cli_side_by_side_with_vllm(tmp_path):
    db = tmp_path / "d.duckdb"
    ingest([SAMPLES / "diagnostic_1088.jsonl"], db_path=db)
    result = CliRunner().invoke(
        cli,
        ["replay", "--db", str(db), "--policy", "vllm-default,sglang-default",
         "--set", "block_size=544"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    table = result.output.split("side by side (measured requests):")[1].strip().splitlines()
    # vLLM keeps a state at the 1088 branch point for the third request, and so does
    # SGLang's default strategy (extra_buffer: the second request tracks its branch point).
    assert table[2].split()[:5] == ["vllm-default", "1", "6,528", "1,088", "1,088"]
    assert table[3].split()[:5] == ["sglang-default", "2", "6,528", "1,088", "1,088"]
