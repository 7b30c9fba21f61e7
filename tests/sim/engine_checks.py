"""Checks every replay engine (tests/sim/<engine>/) must pass.

`check_invariants`: the per-request figures against an unbounded dict-of-prefixes oracle
(every earlier request's computed tokens, prompt + outputs - 1, in the same namespace).
`check_end_to_end`: `run_replay` on a sample trace (the waterfall builds) and the CLI's
side-by-side `hpa replay --policy a,b`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy, replay
from analyzer.sim.records import SimRequest
from analyzer.store.ingest import ingest
from tests.conftest import db_rows

SAMPLES = Path(__file__).parents[2] / "sample_traces"


def toks(lo: int, hi: int) -> np.ndarray:
    """Token ids lo..hi-1 (distinct ranges never share a prefix)."""
    return np.arange(lo, hi, dtype=np.int32)


def cat(*parts) -> np.ndarray:
    return np.concatenate(parts).astype(np.int32)


def req(rid: str, prompt, outputs=None, **kw) -> SimRequest:
    return SimRequest(rid, prompt, output_token_ids=outputs, **kw)


def _computed(req) -> list[int]:
    prompt = list(req.prompt_token_ids)
    if req.output_token_ids is None:
        return prompt  # outputs known only as a count match nothing
    return prompt + list(req.output_token_ids)[:-1]


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def oracle_matches(requests, align: int) -> list[int]:
    """Per request: the longest prefix any earlier request computed (same namespace), capped
    at prompt - 1 and floored to `align` tokens."""
    seen: list[tuple[object, list[int]]] = []
    out = []
    for req in requests:
        prompt = list(req.prompt_token_ids)
        best = max((_common(s, prompt) for ns, s in seen if ns == req.namespace), default=0)
        best = min(best, max(len(prompt) - 1, 0))
        out.append(best - best % align)
        seen.append((req.namespace, _computed(req)))
    return out


def check_invariants(requests, policy, align: int) -> list:
    """Run the policy twice; assert determinism, ordering, splits and the oracle bound."""
    results = list(replay(requests, policy))
    assert results == list(replay(requests, policy))
    for req, r, bound in zip(requests, results, oracle_matches(requests, align), strict=True):
        assert r.request_id == req.request_id
        assert 0 <= r.hit_tokens <= r.attention_match_tokens <= bound
        assert r.attention_match_after_spec_tokens == r.attention_match_tokens
        assert r.attention_match_tokens % align == 0
        assert r.sparse_retention_miss_tokens == r.attention_match_tokens - r.hit_tokens
        assert r.sparse_retention_miss_evicted_tokens >= 0
        assert r.sparse_retention_miss_never_kept_tokens >= r.replay_tokens >= 0
        assert (
            r.sparse_retention_miss_never_kept_tokens + r.sparse_retention_miss_evicted_tokens
            == r.sparse_retention_miss_tokens
        )
        assert r.junction_tokens == (
            r.attention_match_tokens if r.sparse_retention_miss_tokens else 0
        )
        if r.error is None:
            decode = max(req.num_output_tokens, 1) - 1
            assert sum(r.chunks) == req.num_prompt_tokens - r.hit_tokens + decode
            assert all(c > 0 for c in r.chunks)
    return results


def check_end_to_end(tmp_path: Path, values: dict, preset: str) -> None:
    """Replaying two samples (token ids, hash ids of 16-token blocks) under `values` stores a
    run whose waterfall sums (build_levels raised nothing), and `hpa replay --policy
    vllm-default,<preset> --set block_size=32` prints both side by side."""
    db = tmp_path / "e2e.duckdb"
    ingest([SAMPLES / "diagnostic_1088.jsonl", SAMPLES / "mixed_hash_ids.jsonl.gz"], db_path=db)
    outcome = run_replay(make_policy(values), db_path=db)
    assert outcome.num_errors == 0
    (bad,) = db_rows(
        db,
        f"""
        SELECT count(*) FROM replay_requests WHERE run_id = {outcome.run_id} AND
            unshared_tokens + lost_routing_tokens + lost_granularity_tokens
            + lost_eviction_tokens + sparse_retention_miss_tokens + lost_spec_decode_tokens
            + hit_tokens <> prompt_tokens
        """,
    )
    assert bad == (0,)
    (hits,) = db_rows(
        db, f"SELECT sum(hit_tokens) FROM replay_requests WHERE run_id = {outcome.run_id}"
    )
    assert hits[0] > 0
    result = CliRunner().invoke(
        cli,
        ["replay", "--db", str(db), "--policy", f"vllm-default,{preset}", "--set", "block_size=32"],
    )
    assert result.exit_code == 0, result.output
    table = result.output.split("side by side (measured requests):")[1].strip().splitlines()
    assert table[2].split()[0] == "vllm-default"
    assert table[3].split()[0] == preset


def waterfall_totals(db: Path, run_id: int) -> tuple[int, int, int]:
    """(requests, hit tokens, requests whose waterfall does not sum to its prompt) of a run."""
    return db_rows(
        db,
        f"""
        SELECT count(*), sum(hit_tokens), count(*) FILTER (WHERE
            unshared_tokens + lost_routing_tokens + lost_granularity_tokens
            + lost_eviction_tokens + sparse_retention_miss_tokens + lost_spec_decode_tokens
            + hit_tokens <> prompt_tokens)
        FROM replay_requests WHERE run_id = {int(run_id)}
        """,
    )[0]
