"""Replay speed: our vLLM replay against vLLM 0.33's own scheduler (oracle/) on one trace.

Trace: like the oracle's `--synthetic` generator, `--requests` prompts of about 2,000 tokens
(+-64), each starting with one of 8 system prompts of 1,000 tokens; seeded numpy, so every run
replays the same trace. Policy: full attention + Mamba (align), 544-token blocks, retention 0,
no capacity limit (SPEC 9). The trace is written in the oracle's JSONL format to a temporary
directory; the oracle runs it twice as a subprocess: once with `--quiet` for its
`replay_seconds` (which excludes its 6-12 s start-up), once printing per-request results,
which must equal ours request by request (hit, sparse-retention miss, junction).

Without the oracle's Python (`$HPA_ORACLE_PYTHON`, default ~/.cache/hpa-oracle/bin/python)
only our figures are printed. Usage: `python bench/bench_replay.py [--requests 20000]`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer.sim.policy import make_policy  # noqa: E402
from analyzer.sim.records import SimRequest  # noqa: E402
from analyzer.sim.vllm import replay  # noqa: E402

ORACLE_PYTHON = Path(
    os.environ.get("HPA_ORACLE_PYTHON", Path.home() / ".cache/hpa-oracle/bin/python")
)
ORACLE_SCRIPT = Path(
    os.environ.get("HPA_ORACLE_SCRIPT", ROOT.parent / "shared/oracle/vllm_oracle.py")
)
BLOCK = 544
POLICY = {"block_size": BLOCK, "groups": ["full_attention", "mamba"], "retention_interval": 0}


def make_trace(num_requests: int, seed: int) -> list[np.ndarray]:
    """Prompts of ~2,000 tokens: one of 8 system prompts (1,000 tokens) + a unique user part."""
    rng = np.random.default_rng(seed)
    systems = [rng.integers(0, 32000, 1000, dtype=np.int32) for _ in range(8)]
    which = rng.integers(0, 8, num_requests)
    lengths = 1000 + rng.integers(-64, 65, num_requests)
    return [
        np.concatenate([systems[w], rng.integers(0, 32000, n, dtype=np.int32)])
        for w, n in zip(which, lengths, strict=True)
    ]


def run_ours(prompts: list[np.ndarray]) -> tuple[float, list]:
    requests = [SimRequest(f"syn-{i}", p) for i, p in enumerate(prompts)]
    policy = make_policy(POLICY)
    started = time.perf_counter()
    results = list(replay(requests, policy))
    return time.perf_counter() - started, results


def run_oracle(trace: Path, quiet: bool) -> list[dict]:
    cmd = [
        str(ORACLE_PYTHON),
        str(ORACLE_SCRIPT),
        "--trace",
        str(trace),
        "--block-size",
        str(BLOCK),
        "--mamba-mode",
        "align",
        "--retention-interval",
        "0",
        "--num-gpu-blocks",
        "200000",
        "--no-chunks",
    ] + (["--quiet"] if quiet else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ORACLE_SCRIPT.parent)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def oracle_figures(prompts: list[np.ndarray], results: list) -> float | None:
    """The oracle's requests/s on the same trace, after checking its per-request results."""
    if not (ORACLE_PYTHON.exists() and ORACLE_SCRIPT.exists()):
        print(f"oracle not found ({ORACLE_PYTHON}, {ORACLE_SCRIPT}): our figures only")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        with trace.open("w") as f:
            for i, p in enumerate(prompts):
                f.write(json.dumps({"request_id": f"syn-{i}", "prompt_token_ids": p.tolist()}))
                f.write("\n")
        summary = run_oracle(trace, quiet=True)[-1]
        rows = run_oracle(trace, quiet=False)[:-1]
    mismatches = [
        (r.request_id, mine, theirs)
        for r, o in zip(results, rows, strict=True)
        if (mine := (r.hit_tokens, r.sparse_retention_miss_tokens, r.junction_tokens))
        != (theirs := (o["hit"], o["uncached_common"], o["junction"]))
    ]
    assert not mismatches, f"{len(mismatches)} requests differ, e.g. {mismatches[:3]}"
    print(
        f"identical per-request results ({len(rows):,} requests, "
        f"{sum(o['hit'] for o in rows):,} hit tokens)"
    )
    return summary["replay_seconds"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    prompts = make_trace(args.requests, args.seed)
    tokens = sum(len(p) for p in prompts)
    print(
        f"trace: {len(prompts):,} requests, {tokens:,} prompt tokens, FA+Mamba, B={BLOCK}, "
        "retention 0"
    )
    seconds, results = run_ours(prompts)
    oracle_seconds = oracle_figures(prompts, results)
    print(f"{'contender':<10} {'seconds':>8} {'req/s':>10} {'M prompt tok/s':>15}")
    rows = [("hpa", seconds)] + ([("vllm 0.33", oracle_seconds)] if oracle_seconds else [])
    for name, secs in rows:
        print(f"{name:<10} {secs:8.3f} {len(prompts) / secs:10,.0f} {tokens / secs / 1e6:15.1f}")
    ours_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory: hpa process {ours_mib:,.0f} MiB (trace generation included)")
    if oracle_seconds:
        oracle_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"peak memory: vLLM oracle process {oracle_mib:,.0f} MiB")
        print("(vllm: its summary's replay_seconds, start-up and trace loading excluded)")
        print(f"speed ratio hpa/vLLM: {oracle_seconds / seconds:.1f}x (target >= 10x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
