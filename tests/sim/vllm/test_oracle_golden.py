"""Differential tests against golden files made by vLLM 0.33.0's own scheduler (oracle/).

`tests/golden/oracle/cases.json` maps a case name to its trace, its policy
(docs/definitions.md#replay-policies) and the oracle command; `<case>.expected.jsonl` holds one line
per request, then a summary line. Every request's hit, sparse-retention miss (`uncached_common`),
junction, attention match (`attn_match`, vLLM's, after lookahead/drop) and chunk list must match
exactly.

The oracle's fake model samples token 0 when a trace record has no output tokens, and with
EAGLE lookahead hashes that token is part of the last prompt block's hash; the records are
therefore replayed with `output_token_ids=[0]` in that case (same schedule: one sampled token).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import replay

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "oracle"


def _cases() -> dict:
    path = GOLDEN / "cases.json"
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return data.get("cases", data)


CASES = _cases()
GROUP_FLAGS = {
    "--num-full-groups": "full_attention",
    "--num-mamba-groups": "mamba",
    "--num-swa-groups": "sliding_window",
}


def _num_groups(args: list[str], groups: tuple[str, ...]) -> dict[str, int]:
    counts = {}
    for flag, name in GROUP_FLAGS.items():
        if flag in args and name in groups:
            counts[name] = int(args[args.index(flag) + 1])
    return counts


def _requests(trace: Path) -> list[SimRequest]:
    out = []
    for line in trace.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            outputs = rec.get("output_token_ids") or [0]
            out.append(SimRequest(str(rec["request_id"]), rec["prompt_token_ids"], outputs))
    return out


@pytest.mark.skipif(not CASES, reason="no golden files in tests/golden/oracle")
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_vllm_oracle(name):
    case = CASES[name]
    policy = make_policy(case["policy"])
    expected_file = GOLDEN / case.get("expected", f"{name}.expected.jsonl")
    rows = [json.loads(line) for line in expected_file.read_text().splitlines() if line.strip()]
    expected = [row for row in rows if not row.get("summary")]
    requests = _requests(GOLDEN / case["trace"])
    num_groups = _num_groups(case.get("oracle_args", []), policy.groups)
    results = list(replay(requests, policy, num_groups=num_groups or None))
    assert len(results) == len(expected)
    for want, got in zip(expected, results, strict=True):
        assert got.request_id == want["request_id"]
        assert (
            got.hit_tokens,
            got.sparse_retention_miss_tokens,
            got.junction_tokens,
            got.attention_match_after_spec_tokens,
            list(got.chunks),
            got.error is not None,
        ) == (
            want["hit"],
            want["uncached_common"],
            want["junction"],
            want["attn_match"],
            want["chunks"],
            "error" in want,
        ), want["request_id"]
