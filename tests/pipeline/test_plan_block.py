"""The plan's block-size line: where the target is missed at the policy's block and whole
blocks of another size the model allows would recover the granularity loss (the report's
floor, `config/block_floor.py`), one replay at that size says whether the target is within
reach there (pass over RAGPulse: `hpa plan --target-useful-hit-ratio 0.2 --model qwen3.5-4b`
said unreachable, and `--set block_size=1024` reached it)."""

from __future__ import annotations

from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.pipeline.plan import plan
from tests.conftest import shared_head_db

LINE = (
    "block size: match granularity loses 14.8% of the prompt tokens in whole 528-token "
    "blocks, and would lose 0.0% in whole 1,024-token blocks; one replay at block_size 1,024 "
    "(the model's groups, every state kept, an unbounded pool) reaches 0.271"
)


def test_a_missed_target_names_the_block_size_that_reaches_it(tmp_path):
    db = shared_head_db(tmp_path)
    r = plan(0.2, db_path=db, model="qwen3.5-4b")
    assert not r.reachable and r.unbounded_ratio < 0.2
    assert r.check == (
        LINE + ", the target within reach: add --set block_size=1024 to this plan to size its pool"
    )
    assert plan(0.2, db_path=db, model="qwen3.5-4b", policy={"block_size": 1024}).reachable
    out = CliRunner().invoke(
        cli, ["plan", "--db", str(db), "--target-useful-hit-ratio", "0.2", "--model", "qwen3.5-4b"]
    )
    assert out.exit_code == 1, out.output  # unreachable at the policy's block
    assert out.output.rstrip().endswith(r.check)


def test_above_the_bound_the_line_says_the_block_size_falls_short_too(tmp_path):
    r = plan(0.4, db_path=shared_head_db(tmp_path), model="qwen3.5-4b")
    assert r.message.startswith("unreachable: target 0.400 is above the attention-only bound")
    assert r.check == LINE + ", still short of the target"


def test_no_line_where_the_block_loses_nothing_or_the_target_is_met(tmp_path):
    (tmp_path / "a").mkdir()
    whole = plan(0.2, db_path=shared_head_db(tmp_path / "a", head_tokens=1_056), model="qwen3.5-4b")
    assert whole.check is None  # two whole 528-token pages: no granularity loss
    (tmp_path / "b").mkdir()
    met = plan(0.1, db_path=shared_head_db(tmp_path / "b"), model="qwen3.5-4b")
    assert met.reachable and met.check is None
