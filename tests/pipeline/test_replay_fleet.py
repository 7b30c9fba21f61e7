"""`hpa replay` with a live router: one fleet per model revision on one clock; the waterfall
from where each request was actually sent; what the router saw, stored."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from tests.conftest import db_rows as rows

SAMPLES = Path(__file__).parents[2] / "sample_traces"
LIVE = {
    "model": "qwen3-next-80b-a3b",
    "schedule": "concurrent",
    "num_blocks": 300,
    "replicas": 3,
    "time_scale": 0.2,
    "max_num_batched_tokens": 2048,
}


@pytest.fixture(scope="module")
def mixed_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("fleet") / "m.duckdb"
    ingest([SAMPLES / "mixed.jsonl.gz"], db_path=db)
    return db


@pytest.mark.parametrize("routing", ["dynamo", "llm-d", "least_loaded"])
def test_the_waterfall_follows_where_requests_were_sent(mixed_db, routing):
    outcome = run_replay(make_policy({**LIVE, "routing": routing}), db_path=mixed_db)
    run = outcome.run_id
    # every token in one cause, none negative
    assert rows(
        mixed_db,
        f"""SELECT count(*) FROM replay_requests WHERE run_id = {run} AND (
            unshared_tokens + lost_routing_tokens + lost_granularity_tokens
            + lost_eviction_tokens + lost_in_flight_tokens + sparse_retention_miss_tokens
            + lost_spec_decode_tokens + hit_tokens != prompt_tokens
            OR least(unshared_tokens, lost_routing_tokens, lost_granularity_tokens,
                     lost_eviction_tokens, sparse_retention_miss_tokens) < 0)""",
    ) == [(0,)]
    got = rows(
        mixed_db,
        f"""SELECT count(DISTINCT replica), bool_and(route_waiting >= 0),
                   bool_and(route_running >= 0), bool_and(route_kv_blocks_used <= 299),
                   sum(lost_routing_tokens) > 0
            FROM replay_requests WHERE run_id = {run}""",
    )
    assert got == [(3, True, True, True, True)]


def test_l2_is_the_prefix_shared_on_the_chosen_replica(mixed_db):
    """L2 from the actual routing, checked by a plain loop over the stored rows (a request
    offers its prompt and its outputs but the last, within its revision and namespace)."""
    outcome = run_replay(make_policy({**LIVE, "routing": "dynamo"}), db_path=mixed_db)
    got = rows(
        mixed_db,
        f"""SELECT r.arrival_seq, (q.model_revision, q.cache_salt, q.lora_name, r.replica),
                   r.shared_replica_tokens, q.prompt_token_ids, q.output_token_ids
            FROM replay_requests r JOIN requests q USING (request_id)
            WHERE r.run_id = {outcome.run_id} ORDER BY r.arrival_seq""",
    )
    seen: dict[tuple, list[np.ndarray]] = {}  # per (revision, namespace, replica)
    for _, replica, shared, prompt, outputs in got[:400]:
        prompt = np.asarray(prompt)
        best = 0
        for earlier in seen.get(replica, []):
            size = min(len(prompt), len(earlier))
            differ = np.flatnonzero(prompt[:size] != earlier[:size])
            best = max(best, int(differ[0]) if len(differ) else size)
        assert shared == best
        outputs = list(outputs or [])
        computed = np.concatenate([prompt, np.asarray(outputs[:-1], dtype=prompt.dtype)])
        seen.setdefault(replica, []).append(computed)


def test_a_live_replay_is_deterministic(mixed_db, tmp_path):
    policy = make_policy({**LIVE, "routing": "sglang", "router_seed": 7})
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    run_replay(policy, db_path=mixed_db, out=first)
    run_replay(policy, db_path=mixed_db, out=second)
    assert first.read_bytes() == second.read_bytes()
