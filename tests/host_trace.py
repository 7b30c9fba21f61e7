"""A five-request trace where a host KV tier gives back what the GPU evicted: three 64-token
prefixes and a 16-token tail each; P and Q come back after two others filled the 8-block GPU
pool (16-token blocks), so the GPU evicted them and a host tier of 32 slots kept them."""

from __future__ import annotations

import json
from pathlib import Path

from analyzer.store.ingest import ingest


def _tokens(n: int, base: int) -> list[int]:
    return list(range(base, base + n))


REQUESTS = [
    ("a", _tokens(64, 1000) + _tokens(16, 100)),
    ("b", _tokens(64, 5000) + _tokens(16, 200)),
    ("c", _tokens(64, 9000) + _tokens(16, 300)),
    ("d", _tokens(64, 1000) + _tokens(16, 400)),
    ("e", _tokens(64, 5000) + _tokens(16, 500)),
]
BASE = {"block_size": 16, "num_blocks": 8, "groups": ["full_attention"]}
TIER = {"host_tier_chunks": 32}
# A model file of 16-token blocks of 32 MiB: 1 GiB holds 32 host slots, as TIER does
MODEL = {
    "block_size": 16,
    "groups": ["full_attention"],
    "num_groups": {"full_attention": 1},
    "bytes_per_block": 2**25,
}


def host_trace_db(tmp_path: Path) -> Path:
    """The trace ingested into a new store under `tmp_path`."""
    trace = tmp_path / "host.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"request_id": r, "timestamp": float(i), "prompt_token_ids": t}) + "\n"
            for i, (r, t) in enumerate(REQUESTS)
        )
    )
    db = tmp_path / "h.duckdb"
    ingest([trace], db_path=db)
    return db


def rotating_records(turns: int, *, blocks: int = 4, block: int = 528) -> list[dict]:
    """Four documents of `blocks` blocks (`block` tokens each; 528 is qwen3.5-4b's) asked in
    turn, 1 s apart, each turn with an 8-token tail of its own and 4 output tokens: a GPU
    pool holding one document keeps none for its next turn, a host tier of all four gives
    them back."""
    docs = [list(range(10_000 * d, 10_000 * d + blocks * block)) for d in range(4)]
    return [
        {
            "request_id": f"r{i}",
            "timestamp": float(i),
            "prompt_token_ids": docs[i % 4] + [90_000 + 10 * i + k for k in range(8)],
            "output_tokens": 4,
        }
        for i in range(turns)
    ]
