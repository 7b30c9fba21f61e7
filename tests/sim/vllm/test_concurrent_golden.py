"""The concurrent replay against golden files made by vLLM 0.33.0's own scheduler driven on a
simulated clock (`oracle/vllm_oracle.py --concurrent`, see tools/oracle/make_concurrent_goldens.py).

Per request, at its first admission: hit, sparse-retention miss, junction and attention
match; over the whole run: preemptions, hits over every admission, the chunks scheduled per
step, and the simulated times (arrival, first scheduled, first token, finished) within 1e-6 s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import replay

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "oracle_concurrent"
CASES = json.loads((GOLDEN / "cases.json").read_text())["cases"] if GOLDEN.exists() else {}
TIMES = ("arrival_s", "first_scheduled_s", "first_token_s", "finished_s")


def _requests(trace: Path) -> list[SimRequest]:
    out = []
    for line in trace.read_text().splitlines():
        rec = json.loads(line)
        outputs = rec.get("output_token_ids") or [0]  # the oracle samples token 0
        out.append(
            SimRequest(
                rec["request_id"], rec["prompt_token_ids"], outputs, timestamp_s=rec["timestamp"]
            )
        )
    return out


def _counts(result) -> dict:
    return {
        "hit": result.hit_tokens,
        "uncached_common": result.sparse_retention_miss_tokens,
        "junction": result.junction_tokens,
        "attn_match": result.attention_match_after_spec_tokens,
        "num_preemptions": result.num_preemptions,
        "hit_total": result.hit_total_tokens,
        "chunks": list(result.chunks),
    }


@pytest.mark.skipif(not CASES, reason="no golden files in tests/golden/oracle_concurrent")
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_vllm_oracle_concurrently(name):
    case = CASES[name]
    rows = [json.loads(line) for line in (GOLDEN / case["expected"]).read_text().splitlines()]
    expected = [row for row in rows if not row.get("summary")]
    summary = next(row for row in rows if row.get("summary"))
    results = list(replay(_requests(GOLDEN / case["trace"]), make_policy(case["policy"])))
    assert [r.request_id for r in results] == [w["request_id"] for w in expected]
    for want, got in zip(expected, results, strict=True):
        assert _counts(got) == {k: want[k] for k in _counts(got)}, want["request_id"]
        for field in TIMES:
            assert getattr(got, field) == pytest.approx(want[field], abs=1e-6), (
                want["request_id"],
                field,
            )
    assert sum(r.num_preemptions for r in results) == summary["preemptions"]
