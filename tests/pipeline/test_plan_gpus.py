"""`hpa plan --gpu`: the answer in GPUs, ranked by GPUs in all before cache; the figures are
config.hardware's arithmetic at the planned pool; the options' errors."""

from __future__ import annotations

import json

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from analyzer.cli import cli
from analyzer.config.hardware import GPUS, gpu_memory, gpu_plan
from analyzer.config.models import load_model
from analyzer.pipeline.plan.answer import Framing, answer_for
from analyzer.pipeline.plan.ask import PlanAsk
from analyzer.pipeline.plan.evaluate import Measure, Targets
from analyzer.pipeline.plan.pool import Found
from analyzer.pipeline.plan.search import Outcome, Search
from analyzer.sim.dispatch import make_policy

GIB = 2**30
PRESET = load_model("qwen3.5-4b")


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _plan(db, *extra: str):
    return run("plan", "--db", str(db), "--target-useful-hit-ratio", "0.3", "--model",
               "qwen3.5-4b", *extra)  # fmt: skip


def test_plan_in_gpus_is_the_hardware_arithmetic_at_the_planned_pool(groups_db):
    r = _plan(groups_db, "--gpu", "h100", "--format", "json")
    assert r.exit_code == 0, r.output
    answer = orjson.loads(r.output)
    expected = gpu_plan(
        cache_bytes=answer["num_blocks"] * PRESET["bytes_per_block"],
        weights_bytes=PRESET["weights_bytes"],
        num_caches=answer["caches"],
        gpu=GPUS["h100"],
        tensor_parallel=None,
        bytes_per_block=PRESET["bytes_per_block"],
    )
    assert answer["gpus"] == expected.as_dict()
    assert answer["gpus"]["total_gpus"] == 1 and answer["gpus"]["fits"] is True
    assert all(c["gpus"] is not None for c in answer["candidates"])
    plain = orjson.loads(_plan(groups_db, "--format", "json").output)
    assert plain["gpus"] is None and plain["num_blocks"] == answer["num_blocks"]


def test_plan_in_gpus_table(groups_db):
    r = _plan(groups_db, "--gpu-memory-gib", "8")
    assert r.exit_code == 0, r.output
    header = next(line for line in r.output.splitlines() if line.startswith("retention"))
    assert header.split()[-3:] == ["tensor_parallel", "total_gpus", "fits"]
    line = next(line for line in r.output.splitlines() if line.startswith("gpus: "))
    # 9 GB of weights over 0.9 x 8 GiB per GPU: two GPUs a replica.
    assert line.startswith("gpus: 8 GiB GPU (8 GiB): tensor parallel 2; a GPU holds 4.2 GiB")
    assert line.endswith("2 a replica x 1 = 2 GPUs")
    assert "; 2 x 8 GiB GPU in all [" in r.output.splitlines()[-1]


def test_a_fixed_tensor_parallel_that_does_not_fit_is_said(groups_db):
    r = _plan(groups_db, "--gpu-memory-gib", "8", "--tensor-parallel", "1")
    assert r.exit_code == 0, r.output
    line = next(line for line in r.output.splitlines() if line.startswith("gpus: "))
    assert line.endswith(
        "the weights alone (8.4 GiB per GPU at TP 1) exceed 0.9 x 8 GiB per 8 GiB GPU; "
        "--tensor-parallel 2 would hold the replica"
    )


def _without_weights(tmp_path) -> str:
    path = tmp_path / "m.json"
    keys = {k: PRESET[k] for k in ("block_size", "groups", "bytes_per_block")}
    path.write_text(json.dumps(keys))
    return str(path)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tensor-parallel", "2"], "Error: --tensor-parallel needs --gpu or --gpu-memory-gib"),
        (["--gpu", "h100", "--tensor-parallel", "0"],
         "Error: --tensor-parallel 0: expected an integer >= 1"),
        (["--gpu", "v100"], "Error: --gpu 'v100': unknown GPU; known: H100, H200, B200, "
         "MI300X, A100, L40S (or --gpu-memory-gib X for another)"),
        (["--gpu", "h100", "--gpu-memory-gib", "80"],
         "Error: give --gpu NAME or --gpu-memory-gib X, not both"),
        (["--gpu-memory-gib", "0"], "Error: --gpu-memory-gib 0.0: expected a positive number "
         "of GiB"),
        (["--gpu", "h100"], "Error: --gpu and --gpu-memory-gib need a --model with "
         "bytes_per_block and weights_bytes"),
        (["--gpu", "h100", "--model", "WEIGHTLESS"], "Error: --gpu and --gpu-memory-gib need "
         "a --model with bytes_per_block and weights_bytes (WEIGHTLESS has no weights_bytes)"),
    ],
)  # fmt: skip
def test_plan_gpu_option_errors(groups_db, tmp_path, extra, message):
    model = _without_weights(tmp_path)
    extra = [model if x == "WEIGHTLESS" else x for x in extra]
    r = run("plan", "--db", str(groups_db), "--target-useful-hit-ratio", "0.3", *extra)
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines()[-1] == message.replace("WEIGHTLESS", model)


def _search(memory_gib: float, tensor_parallel: int | None = None) -> Search:
    return Search(
        trace=None,
        family=None,
        targets=Targets(0.5),
        budget_blocks=None,
        per_block=GIB,
        num_revisions=1,
        gpu=gpu_memory(None, memory_gib),
        weights_bytes=10 * GIB,
        tensor_parallel=tensor_parallel,
    )


def _outcome(replicas: int, num_blocks: int) -> Outcome:
    policy = make_policy({"block_size": 16, "replicas": replicas, "routing": "round_robin"})
    found = Found(num_blocks, Measure(0.6, True), 1, "target")
    return Outcome(policy, found, 1, 1)


def test_gpus_rank_before_cache():
    """One replica with a 100 GiB pool takes one GPU; two with 40 GiB each take less cache
    (80 GiB) but two GPUs, each holding the weights: in GPUs the one replica is cheaper."""
    search = _search(memory_gib=200)
    framing = Framing(
        PlanAsk(0.5, gpu_memory_gib=200), 16, search, "GiB", make_policy({"block_size": 16})
    )
    one, two = _outcome(1, 100), _outcome(2, 40)
    answer = answer_for(framing, None, [two, one])
    assert [(c.replicas, c.gpus.total_gpus, c.cost) for c in answer.candidates] == [
        (1, 1, 100.0),
        (2, 2, 80.0),
    ]
    assert answer.message.endswith("; 1 x 200 GiB GPU in all")
    plain = Framing(
        PlanAsk(0.5),
        16,
        Search(None, None, Targets(0.5), None, GIB, 1),
        "GiB",
        make_policy({"block_size": 16}),
    )
    assert [c.replicas for c in answer_for(plain, None, [one, two]).candidates] == [2, 1]


def test_a_setting_that_does_not_fit_ranks_last():
    search = _search(memory_gib=20, tensor_parallel=1)  # 18 GiB usable: 10 weights + 8 KV
    fits, too_big = search.rank(_outcome(2, 8).policy, 8), search.rank(_outcome(1, 9).policy, 9)
    assert fits < too_big and too_big[0] == 1.0


@given(
    blocks=st.integers(1, 5_000),
    more=st.integers(0, 5_000),
    memory_gib=st.floats(11, 400),
    tp=st.sampled_from([None, 1, 2, 8]),
    replicas=st.integers(1, 8),
)
def test_rank_never_falls_as_the_pool_grows(blocks, more, memory_gib, tp, replicas):
    """What makes skipping a setting by its floor exact: a larger pool never ranks better."""
    search = _search(memory_gib, tp)
    policy = _outcome(replicas, blocks).policy
    assert search.rank(policy, blocks) <= search.rank(policy, blocks + more)
