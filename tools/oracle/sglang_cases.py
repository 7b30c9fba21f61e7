"""The SGLang oracle's cases and the comparison with hpa's `sglang` engine, shared by
make_sglang_goldens.py (golden files) and fuzz_sglang.py (random cases).

An oracle case is a trace and the oracle's flags (tools/oracle/sglang/oracle.py);
`policy_of` turns the flags into the hpa policy that means the same cache, and `compare`
replays a case through hpa and lists every request where the two disagree.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ORACLE = REPO / "tools" / "oracle" / "sglang" / "oracle.py"
DEFAULT_PYTHON = os.path.expanduser("~/.cache/hpa-oracle-sglang/bin/python")
DEFAULTS = {
    "layout": "mamba",
    "strategy": "no_buffer",
    "page": 1,
    "chunk": 8192,
    "track-interval": 256,
    "kv-tokens": 1 << 20,
    "num-states": 1024,
    "window": 256,
}
GROUPS = {
    "mamba": ["full_attention", "mamba"],
    "swa": ["full_attention", "sliding_window"],
    "all": ["full_attention", "sliding_window", "mamba"],
}
MAMBA_CHUNK_TOKENS = 64  # FLA's CHUNK_SIZE, SGLang's mamba_cache_chunk_size below a page


def policy_of(args: dict[str, Any]) -> dict[str, Any]:
    """The hpa policy (docs/definitions.md#replay-policies) for an oracle case's flags."""
    a = {**DEFAULTS, **args}
    page = int(a["page"])
    policy: dict[str, Any] = {
        "engine": "sglang",
        "groups": GROUPS[a["layout"]],
        "block_size": page,
        "max_num_batched_tokens": int(a["chunk"]),
        "num_blocks": int(a["kv-tokens"]) // page,
        "spec_decode": "none",
        "sglang_strategy": a["strategy"],
        "sglang_chunk_tokens": MAMBA_CHUNK_TOKENS,
        "sglang_track_interval": int(a["track-interval"]),
    }
    if a["layout"] != "swa":
        policy["sglang_num_states"] = int(a["num-states"])
    if a["layout"] != "mamba":
        policy["sliding_window"] = int(a["window"])
        swa = int(a.get("swa-tokens") or a["kv-tokens"])
        policy["sglang_swa_full_tokens_ratio"] = swa / int(a["kv-tokens"])
    return policy


def run_oracle(cases: Iterable[dict], python: str = DEFAULT_PYTHON) -> dict[str, list[dict]]:
    """Run the oracle once over `cases` ({name, args, requests}); its lines per case."""
    with tempfile.TemporaryDirectory() as tmp:
        batch = Path(tmp) / "batch.jsonl"
        batch.write_text("".join(json.dumps(c, default=_plain) + "\n" for c in cases))
        proc = subprocess.run(
            [python, str(ORACLE), "--batch", str(batch)],
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode:
        raise RuntimeError(f"the SGLang oracle failed:\n{proc.stderr[-3000:]}")
    out: dict[str, list[dict]] = {}
    for line in proc.stdout.splitlines():
        row = json.loads(line)
        out.setdefault(row.pop("case"), []).append(row)
    return out


def _plain(value):
    return value.tolist()  # numpy arrays in generated traces


def hpa_rows(requests: list[dict], args: dict[str, Any]) -> list[dict]:
    """hpa's `sglang` engine on `requests`, in the oracle's per-request fields."""
    from analyzer.sim.dispatch import make_policy
    from analyzer.sim.records import SimRequest
    from analyzer.sim.sglang import replay

    policy = make_policy(policy_of(args))
    sims = [
        SimRequest(
            str(r["request_id"]),
            list(r["prompt_token_ids"]),
            list(r.get("output_token_ids") or []) or [1],
        )
        for r in requests
    ]
    rows = []
    for sim, res in zip(sims, replay(sims, policy), strict=True):
        prompt = sim.num_prompt_tokens
        chunks = list(res.chunks)
        num_prefill = len(chunks) - (sim.num_computed_tokens - prompt)
        row = {
            "request_id": res.request_id,
            "hit": res.hit_tokens,
            "full_kv_hit": res.attention_match_tokens,
            "chunks": chunks[:num_prefill],
            "decode_steps": len(chunks) - num_prefill,
        }
        if res.error:
            row["error"] = res.error
        rows.append(row)
    return rows


COMPARED = ("hit", "full_kv_hit", "chunks", "decode_steps")


def compare(expected: list[dict], got: list[dict]) -> list[str]:
    """One line per request where hpa and the oracle differ (empty: they agree)."""
    want = [r for r in expected if "request_id" in r]
    if len(want) != len(got):
        return [f"{len(want)} requests in the oracle's answer, {len(got)} in hpa's"]
    out = []
    for w, g in zip(want, got, strict=True):
        if ("error" in w) != ("error" in g):
            out.append(f"{w['request_id']}: error oracle={w.get('error')} hpa={g.get('error')}")
            continue
        if "error" in w:
            continue
        diff = [f"{k} oracle={w[k]} hpa={g[k]}" for k in COMPARED if w[k] != g[k]]
        if diff:
            out.append(f"{w['request_id']}: " + "; ".join(diff))
    return out
