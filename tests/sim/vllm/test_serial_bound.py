"""Does the serial schedule reuse at least what the concurrent one does? In an unbounded pool
(`num_blocks` null), the same policy and the same token budget on both: where it holds and
where it does not.

Serial admits each request after the previous one finished; concurrent admits it when it
arrives, while earlier requests may still be in flight. Nothing is evicted from an unbounded
pool, and FCFS admits in arrival order, the serial order; so at a request's admission the
concurrent cache holds a subset of the blocks the serial one holds (what the earlier requests
had scheduled by then against all they computed), and:

- **full attention, any layout**: per request, the full-attention match (`attention_match_*`)
  is serial >= concurrent (every layout caches every full-attention block);
- **full attention alone**: the hit is that match, so per request (and summed) hit serial >=
  concurrent, whatever the budget or speculative decoding.

**With a sparse group (Mamba, sliding window) it is false**: the hit also needs a state (or a
window) at the boundary, and where states exist depends on the schedule, in two ways:

(A) *Chunk ends of a shared step budget* (retention null or N): a request admitted in a step
    where earlier ones spent part of the budget gets the leftover, floored to a block, so its
    chunks end where the serial replay's do not, and under retention null every chunk end is
    a kept state. Golden `tree544_b544_budget1088_retnull` (B 544, budget 1,088), all arriving
    together: t000 (1,456 tokens) takes 1,088 in step 1; in step 2 its last 368 leave t001
    (1,413) 720 tokens, floored to 544, so t001 keeps a state at 544 (serially its chunks are
    1,088 + 325: no state at 544); t004, t001's first 1,087 tokens, matches 544 and hits it
    concurrently, but misses 544 serially. Summed over the trace: serial 69,088 hit tokens,
    concurrent 70,720. Small: `test_a_shared_step_budget_keeps_a_state_serial_never_has`.
(B) *A shallower junction* (any retention, 0 included): a request admitted while an earlier
    one that its prompt extends is still in flight matches only what that one had scheduled,
    so its junction (a chunk end and a kept state) is shallower than the serial one; a later
    request whose shared prefix ends between the two junctions hits the shallow state
    concurrently and misses serially. `test_an_in_flight_prefix_gives_a_shallower_junction`.

So the hit sums are asserted serial >= concurrent for full attention alone (per request, on
every golden trace and on generated traces), and for the sparse layouts of the golden cases
only outside `SPARSE_ABOVE`, the golden runs where mechanism (A) makes concurrent reuse more;
those are pinned at their measured sums. Serial golden traces have no timestamps: they are
replayed as a burst (all at 0) and 20 ms apart. The budget is the case's, or vLLM's 8192 where
the case has none (both schedules then chunk alike).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import replay
from tests.sim.strategies import policies, traces

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
FOLDERS = ("oracle", "oracle_concurrent")
SCHEDULE_ONLY = (
    "schedule",
    "max_num_seqs",
    "step_base_ms",
    "step_token_us",
    "time_scale",
    "async_scheduling",
)
SERIAL_ARRIVALS = {"burst": 0.0, "20ms": 0.02}  # gap between arrivals, serial goldens
# (folder/case, arrivals) -> (serial, concurrent) hit tokens, where (A) makes concurrent more.
SPARSE_ABOVE = {
    ("oracle/tree544_b544_budget1088_retnull", "burst"): (69088, 70720),
    ("oracle/tree544_b544_budget1088_retnull", "20ms"): (69088, 70720),
    ("oracle_concurrent/fuzz_s11_c4_b112_blocks40", "trace"): (33264, 33488),
}
# The same under async scheduling (vLLM's AsyncScheduler: its chunks split the budget a step
# later, so other chunk ends keep states).
SPARSE_ABOVE_ASYNC = {
    ("oracle/tree544_b544_budget1088_retnull", "burst"): (69088, 70720),
    ("oracle/tree544_b544_budget1088_retnull", "20ms"): (69088, 70176),
    ("oracle/tree64_b64_budget128_retnull", "20ms"): (20544, 20608),
    ("oracle_concurrent/fuzz_s11_c4_b112_blocks40", "trace"): (33264, 33488),
}


def _golden_runs() -> list[tuple[str, str, str]]:
    runs = []
    for folder in FOLDERS:
        path = GOLDEN / folder / "cases.json"
        if not path.exists():
            continue
        cases = json.loads(path.read_text())
        for name in sorted(cases.get("cases", cases)):
            if name.endswith("_async"):
                continue  # its trace and cache are its synchronous twin's (both loops run)
            arrivals = ["trace"] if folder == "oracle_concurrent" else list(SERIAL_ARRIVALS)
            runs.extend((folder, name, a) for a in arrivals)
    return runs


def _case(folder: str, name: str) -> dict:
    cases = json.loads((GOLDEN / folder / "cases.json").read_text())
    return cases.get("cases", cases)[name]


def _golden_requests(trace: Path, arrivals: str) -> list[SimRequest]:
    out = []
    for k, line in enumerate(x for x in trace.read_text().splitlines() if x.strip()):
        rec = json.loads(line)
        at = rec["timestamp"] if arrivals == "trace" else k * SERIAL_ARRIVALS[arrivals]
        outputs = rec.get("output_token_ids") or [0]  # the oracle samples token 0
        out.append(
            SimRequest(str(rec["request_id"]), rec["prompt_token_ids"], outputs, timestamp_s=at)
        )
    return out


def _both(requests, values: dict, num_groups=None, async_scheduling: bool = False):
    """The serial and the concurrent replay of `values` (unbounded, one budget for both;
    the concurrent one with or without async scheduling)."""
    values = {k: v for k, v in values.items() if k not in SCHEDULE_ONLY}
    values["num_blocks"] = None
    values["max_num_batched_tokens"] = values.get("max_num_batched_tokens") or 8192
    serial = list(replay(requests, make_policy(values), num_groups=num_groups))
    concurrent_values = {**values, "schedule": "concurrent", "async_scheduling": async_scheduling}
    concurrent = list(replay(requests, make_policy(concurrent_values), num_groups=num_groups))
    return serial, concurrent


def _check_full_attention(serial, concurrent, sparse: bool) -> None:
    for s, c in zip(serial, concurrent, strict=True):
        assert s.request_id == c.request_id
        assert s.attention_match_tokens >= c.attention_match_tokens, s.request_id
        assert s.attention_match_after_spec_tokens >= c.attention_match_after_spec_tokens
        if not sparse:
            assert s.hit_tokens >= c.hit_tokens, s.request_id


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(("folder", "name", "arrivals"), _golden_runs())
def test_serial_reuses_at_least_the_concurrent_schedule_on_the_goldens(
    folder, name, arrivals, async_scheduling
):
    case = _case(folder, name)
    requests = _golden_requests(GOLDEN / folder / case["trace"], arrivals)
    serial, concurrent = _both(requests, case["policy"], None, async_scheduling)
    sparse = case["policy"].get("groups", ["full_attention", "mamba"]) != ["full_attention"]
    _check_full_attention(serial, concurrent, sparse)
    hits = (sum(r.hit_tokens for r in serial), sum(r.hit_tokens for r in concurrent))
    pins = SPARSE_ABOVE_ASYNC if async_scheduling else SPARSE_ABOVE
    above = pins.get((f"{folder}/{name}", arrivals))
    if above is not None:
        assert hits == above  # mechanism (A): concurrent reuses more, as measured
    else:
        assert hits[0] >= hits[1]


def test_the_golden_runs_are_all_there():
    runs = {(f"{folder}/{name}", a) for folder, name, a in _golden_runs()}
    assert len(runs) == 2 * 74 + 19  # 74 serial cases (two arrival patterns), 19 concurrent
    assert set(SPARSE_ABOVE) | set(SPARSE_ABOVE_ASYNC) <= runs


@st.composite
def _timed(draw, requests: list[SimRequest]) -> list[SimRequest]:
    """`requests` with arrival times: gaps from none (a burst) to longer than a request."""
    out, at = [], 0.0
    for r in requests:
        at += draw(st.sampled_from([0.0, 0.0, 0.001, 0.005, 0.05]))
        out.append(
            SimRequest(
                r.request_id,
                r.prompt_token_ids,
                r.output_token_ids,
                r.output_tokens,
                r.namespace,
                timestamp_s=at,
            )
        )
    return out


def _values(policy) -> dict:
    return {k: v for k, v in json.loads(policy.to_json()).items() if k != "model"}


@settings(max_examples=150, deadline=None)
@given(traces().flatmap(_timed), policies(bounded=False))
def test_serial_reuses_at_least_the_concurrent_schedule_on_generated_traces(requests, pc):
    policy, _ = pc
    serial, concurrent = _both(requests, _values(policy))
    _check_full_attention(serial, concurrent, sparse=policy.groups != ("full_attention",))


@settings(max_examples=150, deadline=None)
@given(traces().flatmap(_timed), policies(bounded=False))
def test_full_attention_alone_serial_hits_at_least_the_concurrent(requests, pc):
    values = {**_values(pc[0]), "groups": ["full_attention"], "sliding_window": None}
    values.update(prefix_match_unit=None, retention_interval=0)
    serial, concurrent = _both(requests, values)
    _check_full_attention(serial, concurrent, sparse=False)
    assert sum(r.hit_tokens for r in serial) >= sum(r.hit_tokens for r in concurrent)


def _hits(results) -> list[tuple[int, int]]:
    return [(r.hit_tokens, r.sparse_retention_miss_tokens) for r in results]


def test_a_shared_step_budget_keeps_a_state_serial_never_has():
    """(A), B 4, budget 8, retention null: a and b (12 tokens each, unrelated) arrive
    together; a takes 8 tokens in step 1, its last 4 leave b 4 in step 2, so b's chunks end
    at 4, 8, 12 (serially 8, 12) and b keeps a state at 4. c (b's first 5 tokens + 1) matches
    4: a hit concurrently, a sparse-retention miss serially."""
    a, b = list(range(100, 112)), list(range(200, 212))
    requests = [
        SimRequest("a", a, [1], timestamp_s=0.0),
        SimRequest("b", b, [1], timestamp_s=0.0),
        SimRequest("c", b[:5] + [7], [1], timestamp_s=1.0),
    ]
    values = {"block_size": 4, "retention_interval": None, "max_num_batched_tokens": 8}
    serial, concurrent = _both(requests, values)
    assert [r.chunks[:3] for r in serial[1:2] + concurrent[1:2]] == [(8, 4), (4, 4, 4)]
    assert _hits(serial) == [(0, 0), (0, 0), (0, 4)]
    assert _hits(concurrent) == [(0, 0), (0, 0), (4, 0)]


def test_an_in_flight_prefix_gives_a_shallower_junction():
    """(B), B 4, retention 0: a (8 tokens, 12 outputs) is still decoding when b (a's first 16
    tokens of prompt + outputs, then 8 of its own) arrives at 25 ms; a has scheduled 12 of
    them, so b's junction is 12 (serially 16) and b keeps a state at 12. c (a's first 13
    tokens, after both finished) hits 12 concurrently and 4 serially (a's replay boundary)."""
    a, outputs = list(range(100, 108)), list(range(300, 312))
    seq = a + outputs
    requests = [
        SimRequest("a", a, outputs, timestamp_s=0.0),
        SimRequest("b", seq[:16] + list(range(400, 408)), [1], timestamp_s=0.025),
        SimRequest("c", seq[:13], [1], timestamp_s=1.0),
    ]
    serial, concurrent = _both(requests, {"block_size": 4, "retention_interval": 0})
    assert [r.junction_tokens for r in serial] == [0, 16, 12]
    assert [r.junction_tokens for r in concurrent] == [0, 12, 0]
    assert _hits(serial) == [(0, 0), (4, 12), (4, 8)]
    assert _hits(concurrent) == [(0, 0), (4, 8), (12, 0)]
