"""The concurrent schedule against the serial one: with arrivals far apart no two requests
overlap, so every request must get exactly what the serial golden files (vLLM 0.33's own
scheduler, one request at a time) say: hit, sparse-retention miss, junction, attention match
and chunks."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.errors import ConfigError
from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import replay
from analyzer.sim.vllm.concurrent import ConcurrentReplay
from tests.sim.strategies import policies, traces
from tests.sim.vllm.test_oracle_golden import CASES, GOLDEN, _num_groups, _requests

APART_S = 1000.0  # far longer than any request of the serial traces takes
ONE_CHUNK = 1 << 22  # serial's null budget: a prompt is one chunk


def _far_apart(requests: list[SimRequest]) -> list[SimRequest]:
    return [
        SimRequest(r.request_id, r.prompt_token_ids, r.output_token_ids, timestamp_s=k * APART_S)
        for k, r in enumerate(requests)
    ]


@pytest.mark.skipif(not CASES, reason="no golden files in tests/golden/oracle")
@pytest.mark.parametrize("name", sorted(CASES))
def test_far_apart_arrivals_replay_as_the_serial_goldens(name):
    case = CASES[name]
    # The synchronous loop: with async scheduling a small pool can differ from serial, as
    # vLLM's AsyncScheduler does (a group's blocks are released a step later, so the free
    # queue's order changes: tree64_b64_blocks20 differs on 8 of 100 requests, in both)
    values = {**case["policy"], "schedule": "concurrent", "async_scheduling": False}
    values["max_num_batched_tokens"] = values.get("max_num_batched_tokens") or ONE_CHUNK
    policy = make_policy(values)
    rows = [json.loads(line) for line in (GOLDEN / case["expected"]).read_text().splitlines()]
    expected = [row for row in rows if row and not row.get("summary")]
    requests = _far_apart(_requests(GOLDEN / case["trace"]))
    num_groups = _num_groups(case.get("oracle_args", []), policy.groups) or None
    results = list(replay(requests, policy, num_groups=num_groups))
    assert [r.request_id for r in results] == [w["request_id"] for w in expected]
    for want, got in zip(expected, results, strict=True):
        assert (
            got.hit_tokens,
            got.sparse_retention_miss_tokens,
            got.junction_tokens,
            got.attention_match_after_spec_tokens,
            list(got.chunks),
            got.num_preemptions,
        ) == (
            want["hit"],
            want["uncached_common"],
            want["junction"],
            want["attn_match"],
            want["chunks"],
            0,
        ), want["request_id"]


def test_a_request_without_a_timestamp_is_a_one_line_error():
    policy = make_policy({"block_size": 16, "schedule": "concurrent"})
    requests = [SimRequest("a", [1, 2, 3], timestamp_s=0.0), SimRequest("b", [1, 2])]
    with pytest.raises(ConfigError, match=r"^request 'b' has no timestamp; schedule 'concurrent'"):
        list(replay(requests, policy))


def test_refused_requests_are_reported_as_vllm_reports_them():
    """A 70-block pool (1,104 tokens): `grows` (800 + 400 outputs) is admitted, preempted when
    its decode outgrows the pool, and aborted since its sequence no longer fits alone; `huge`
    (1,200 tokens) never fits. Figures from vLLM 0.33's scheduler (oracle --concurrent)."""
    rng = np.random.default_rng(3)
    requests = [
        SimRequest(
            "grows", rng.integers(0, 1000, 800), rng.integers(0, 1000, 400), timestamp_s=0.0
        ),
        SimRequest("huge", rng.integers(0, 1000, 1200), [1], timestamp_s=100.0),
    ]
    values = {"groups": ["full_attention"], "block_size": 16, "num_blocks": 70}
    sync = {**values, "schedule": "concurrent", "async_scheduling": False}
    grows, huge = replay(requests, make_policy(sync))
    assert (grows.num_preemptions, grows.hit_total_tokens) == (1, 0)
    assert grows.first_token_s == pytest.approx(0.085) and grows.finished_s == pytest.approx(1.6354)
    assert grows.error.startswith(
        "aborted after 1 preemption: its 1105-token sequence"
    )  # 305 outputs
    assert (huge.first_scheduled_s, huge.finished_s, huge.hit_total_tokens) == (None, 100.0, 0)
    assert huge.error == "not schedulable (KV cache too small: 70 blocks?)"


@settings(max_examples=200, deadline=None)
@given(traces(max_requests=14), policies(bounded=True), st.floats(0.0, 0.05))
def test_a_kept_lookup_is_the_lookup_made_again(requests, policy_counts, gap_s):
    """A waiting request's lookup is kept while the pool's map is unchanged: on bursts into
    small pools (heads that wait while others run) every kept lookup and admission is
    recomputed and must be equal, and the results are the same as without keeping any."""
    policy, counts = policy_counts
    policy = replace(policy, schedule="concurrent", max_num_seqs=3)
    timed = [replace(r, timestamp_s=k * gap_s) for k, r in enumerate(requests)]
    kept = list(replay(timed, policy, num_groups=counts))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ConcurrentReplay, "check_memo", True)
        checked = list(replay(timed, policy, num_groups=counts))
        patch.setattr(ConcurrentReplay, "_lookup", _fresh_lookup)
        patch.setattr(ConcurrentReplay, "_memo_admission", ConcurrentReplay._admission)
        fresh = list(replay(timed, policy, num_groups=counts))
    assert kept == checked == fresh


def _fresh_lookup(self, f):
    return self.coord.lookup(f.req.hashes, f.req.num_tokens - 1)


def test_a_request_that_cannot_fit_alone_is_aborted_not_replayed_for_ever():
    """Alone in the pool it preempted itself: readmitted, it would reach the same block and
    preempt itself again (a hypothesis example that looped for ever). 18 + 18 tokens with
    EAGLE's drop, 4-token blocks, 7 usable blocks."""
    policy = make_policy(
        {
            "groups": ["full_attention"],
            "block_size": 4,
            "num_blocks": 8,
            "spec_decode": "eagle_drop",
            "max_num_batched_tokens": 5,
            "schedule": "concurrent",
        }
    )
    request = SimRequest("r", list(range(18)), None, 18, timestamp_s=0.0)
    (result,) = replay([request], policy)
    assert result.error == (
        "aborted after 1 preemption: its 28-token sequence no longer fits the pool (8 blocks)"
    )
