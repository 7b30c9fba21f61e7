"""The plan's block-size line: where the target is missed at the policy's block and whole
blocks of another size the model allows would recover the granularity loss (the report's
floor, `config/block_floor.py`), one replay at that size says whether the target is within
reach there, and where it is the plan is made again at that size (pass over RAGPulse: `hpa
plan --target-useful-hit-ratio 0.2 --model qwen3.5-4b` said unreachable, and `--set
block_size=1024` reached it)."""

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


def test_a_missed_target_names_the_block_size_that_reaches_it_and_plans_there(tmp_path):
    db = shared_head_db(tmp_path)
    r = plan(0.2, db_path=db, model="qwen3.5-4b")
    assert not r.reachable and r.unbounded_ratio < 0.2
    assert r.check == (
        LINE + ", the target within reach: the plan at block_size 1,024 follows (--set "
        "block_size=1024 makes it alone)"
    )
    # the plan at that size is the plan --set block_size=1024 makes, replay for replay
    alone = plan(0.2, db_path=db, model="qwen3.5-4b", policy={"block_size": 1024})
    assert alone.reachable and alone.at_block is None
    assert r.at_block == alone
    assert r.as_dict()["at_block"] == alone.as_dict()
    args = ["plan", "--db", str(db), "--target-useful-hit-ratio", "0.2", "--model", "qwen3.5-4b"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output  # reached, at the block size it names
    first, _, second = out.output.partition(
        "\nplan at block_size 1,024 (every other key as asked):\n"
    )
    assert first.rstrip().endswith(r.check)
    lone = CliRunner().invoke(cli, [*args, "--set", "block_size=1024"])
    assert (lone.exit_code, lone.output) == (0, second)


def test_above_the_bound_the_line_says_the_block_size_falls_short_too(tmp_path):
    r = plan(0.4, db_path=shared_head_db(tmp_path), model="qwen3.5-4b")
    assert r.message.startswith("unreachable: target 0.400 is above the attention-only bound")
    assert r.check == LINE + ", still short of the target"
    assert r.at_block is None  # no second plan where the size falls short too


def test_no_line_where_the_block_loses_nothing_or_the_target_is_met(tmp_path):
    (tmp_path / "a").mkdir()
    whole = plan(0.2, db_path=shared_head_db(tmp_path / "a", head_tokens=1_056), model="qwen3.5-4b")
    assert whole.check is None  # two whole 528-token pages: no granularity loss
    (tmp_path / "b").mkdir()
    met = plan(0.1, db_path=shared_head_db(tmp_path / "b"), model="qwen3.5-4b")
    assert met.reachable and met.check is None
