"""`hpa calibrate` on a policy with a host KV tier: the replay is the one `hpa replay` runs
(the tier's loads in it), so the TTFT terms carry the steps a load takes and the time an idle
engine waits for one; a tier that loads nothing leaves them as they were."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from analyzer.access.trace import load_trace
from analyzer.cli import cli
from analyzer.config.memory import bytes_per_block
from analyzer.config.step_models import step_model
from analyzer.pipeline import calibrate as module
from analyzer.pipeline.calibrate import calibrate
from analyzer.pipeline.calibrate_roofline import RooflineReplayer
from analyzer.pipeline.replay import num_groups, replay_rows, routed_partitions, run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.sim.vllm import concurrent_replay
from analyzer.store.db import connect
from analyzer.store.ingest import ingest
from tests.conftest import write_jsonl
from tests.host_trace import rotating_records
from tests.pipeline.conftest import observe_replayed_ttft

BLOCK = 64
# qwen3.5-4b's full attention alone at 64-token blocks (2 MiB a block): a 12-block GPU pool
# holds one 8-block document, a 1 GiB tier all four, loaded at 0.1 GB/s (a document's 16.8 MB
# take 168 ms: longer than a step, so an idle engine waits for it).
TIER = {"host_tier_gib": 1.0, "host_bandwidth_gbps": 0.1}
POLICY = {
    "model": "qwen3.5-4b",
    "groups": ["full_attention"],
    "block_size": BLOCK,
    "schedule": "concurrent",
    "async_scheduling": False,
    "num_blocks": 12,
    "step_base_ms": 12.0,
    "step_token_us": 40.0,
}
OVERRIDES = [  # calibrate's --set: POLICY without its step time
    *("model=qwen3.5-4b", 'groups=["full_attention"]', f"block_size={BLOCK}"),
    *("async_scheduling=false", "num_blocks=12"),
]


@pytest.fixture(scope="module")
def rotating_db(tmp_path_factory) -> Path:
    """Four documents of eight blocks asked in turn, three times each, 1 s apart, with the TTFT
    the tier's concurrent replay gives at 12 ms + 40 us a token as the observed ttft_ms."""
    tmp = tmp_path_factory.mktemp("rotating_calibrate")
    records = rotating_records(12, blocks=8, block=BLOCK)
    db = tmp / "t.duckdb"
    ingest([write_jsonl(tmp / "t.jsonl", records)], db_path=db)
    run_replay(make_policy({**POLICY, **TIER}), db_path=db)
    return observe_replayed_ttft(db)


def _trace(db: Path):
    con = connect(db, create=False, reader=True)
    try:
        return load_trace(con)
    finally:
        con.close()


def _replayed_ttft_s(trace, policy) -> np.ndarray:
    """Each request's TTFT as the replay gives it (first token - arrival)."""
    ns, _, _ = routed_partitions(trace, policy)  # one replica: one partition
    replay = concurrent_replay(policy, num_groups=num_groups(policy))
    results = replay.run(trace.sim_request(i, ns[i]) for i in range(trace.n))
    return np.asarray([r.first_token_s - r.arrival_s for r in results])


def _linear_s(terms: np.ndarray, policy) -> np.ndarray:
    return (
        terms[:, 0]
        + policy.step_base_ms / 1e3 * terms[:, 1]
        + policy.step_token_us / 1e6 * (terms[:, 2])
    )


@pytest.mark.parametrize(
    ("keys", "loads"),
    [
        ({}, False),  # the pool holds one document: every turn computes its document again
        (TIER, True),  # the tier gives the 20 later turns back, loaded
        ({**TIER, "num_blocks": 100}, False),  # the pool holds all four: the tier loads none
    ],
)
def test_the_terms_are_the_replayed_ttft_and_a_tier_moves_them_where_it_loads(
    rotating_db, keys, loads
):
    trace = _trace(rotating_db)
    policy = make_policy({**POLICY, **keys})
    terms = module._terms(trace, policy)
    # at the policy's own time model the terms give back the replay's TTFT, waits included
    assert _linear_s(terms, policy) == pytest.approx(_replayed_ttft_s(trace, policy), abs=1e-9)
    without = module._terms(trace, make_policy({**POLICY, **keys, "host_tier_gib": 0}))
    moved = (terms != without).any(axis=1)
    assert moved.any() == loads
    if loads:
        # the first turn of each document computes it (one step of 520 tokens); each later
        # turn loads it: the load's step (no tokens, lasting until the load has crossed the
        # link) and the step that computes its 8-token tail; the load's time beyond its own
        # step's 12 ms is the lead
        assert not moved[:4].any() and moved[4:].all()
        assert without[4:].tolist() == [[0.0, 1, 520]] * 8
        load_s = 8 * bytes_per_block("qwen3.5-4b", BLOCK) / 0.1e9
        assert terms[4:, 1:].tolist() == [[2, 8]] * 8
        assert terms[4:, 0] == pytest.approx([load_s - 0.012] * 8, abs=1e-12)


def test_calibrate_fits_a_tier_replay_and_misses_without_its_tier(rotating_db):
    """The observed TTFT came from the tier's replay: calibrated with the tier the fit
    recovers its step time (12 ms + 40 us a token); the same step time without the tier
    (every turn computes its document) predicts none of the loads' TTFT."""
    overrides = [*OVERRIDES, "host_tier_gib=1", "host_bandwidth_gbps=0.1"]
    fit = calibrate(None, overrides, db_path=rotating_db)
    assert fit.r2 > 0.999 and fit.num_requests == 12
    assert (fit.policy.step_base_ms, fit.policy.step_token_us) == (12.0, 40.0)
    assert fit.policy.option("host_tier_gib") == 1.0
    trace, observed = module._load(rotating_db)
    untiered = make_policy({**json.loads(fit.policy.to_json()), "host_tier_gib": 0})
    blind = module._evaluate(trace, untiered, observed)[0]
    assert blind.r2 < 0


def test_a_tier_under_async_scheduling_is_a_one_line_error(rotating_db):
    args = ["calibrate", "--db", str(rotating_db), "--set", "model=qwen3.5-4b"]
    r = CliRunner().invoke(cli, [*args, "--set", "host_tier_gib=1"])
    assert r.exit_code == 2
    assert r.output == (
        "Error: policy key 'host_tier_gib': a host tier is not modelled with async_scheduling "
        "(two steps in flight); set async_scheduling false\n"
    )


def test_the_roofline_fit_replays_the_tier_as_replay_does(rotating_db):
    """`hpa calibrate --gpu`'s replays (RooflineReplayer) give each request the TTFT `hpa
    replay` gives with the tier, and count a host hit as not computed (its bins)."""
    keys = {k: v for k, v in POLICY.items() if not k.startswith("step_")}
    policy = make_policy({**keys, **TIER, "gpu": "H200"})
    trace = _trace(rotating_db)
    replayer = RooflineReplayer(trace, policy)
    ttft_ms = replayer.ttft_ms(step_model(policy).efficiency)
    assert ttft_ms == pytest.approx(np.asarray(replay_rows(trace, policy)["ttft_s"]) * 1e3)
    assert replayer.new_tokens.tolist() == [520] * 4 + [8] * 8
