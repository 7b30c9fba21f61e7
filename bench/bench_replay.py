"""Replay speed: our vLLM replay against vLLM 0.33's own scheduler (oracle/), layout by layout.

Trace: like the oracle's `--synthetic` generator, `--requests` prompts of about 2,000 tokens
(+-64), each starting with one of 8 system prompts of 1,000 tokens; seeded numpy, so every run
replays the same trace. Layouts (`--layouts`, default all): the closed form (full attention +
Mamba align, 544-token blocks, retention 0, no capacity limit:
docs/definitions.md#performance-targets), and block by block a bounded pool (full attention at 16-
and 544-token blocks: the compiled loop; full attention + Mamba), a 32-token match unit, a sliding
window, EAGLE. The trace is written in the oracle's JSONL format to a temporary directory; for each
layout the oracle runs it twice as a subprocess: once with `--quiet` for its `replay_seconds` (which
excludes its 6-12 s start-up), once printing per-request results, which must equal ours request by
request (hit, sparse-retention miss, junction). Ours is timed after an untimed replay of 3 requests
(the compiled loop's kernel is loaded, as in any process that replays more than once).

Without the oracle's Python (`$HPA_ORACLE_PYTHON`, default ~/.cache/hpa-oracle/bin/python)
only our figures are printed. Usage: `python bench/bench_replay.py [--requests 10000]
[--layouts closed,fa16_bounded]`.
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

from analyzer.sim.dispatch import make_policy  # noqa: E402
from analyzer.sim.records import SimRequest  # noqa: E402
from analyzer.sim.vllm import replay  # noqa: E402

ORACLE_PYTHON = Path(
    os.environ.get("HPA_ORACLE_PYTHON", Path.home() / ".cache/hpa-oracle/bin/python")
)
ORACLE_SCRIPT = Path(
    os.environ.get("HPA_ORACLE_SCRIPT", ROOT.parent / "shared/oracle/vllm_oracle.py")
)
FA, MAMBA = ["full_attention"], ["full_attention", "mamba"]
# name -> (our policy, the oracle's flags): the same cache, described to each
LAYOUTS = {
    "closed": (
        {"block_size": 544, "groups": MAMBA, "retention_interval": 0},
        "--block-size 544 --mamba-mode align --retention-interval 0 --num-gpu-blocks 200000",
    ),
    "fa16_bounded": (
        {"block_size": 16, "groups": FA, "num_blocks": 20000},
        "--block-size 16 --mamba-mode off --num-gpu-blocks 20000",
    ),
    "fa544_bounded": (
        {"block_size": 544, "groups": FA, "num_blocks": 2000},
        "--block-size 544 --mamba-mode off --num-gpu-blocks 2000",
    ),
    "mamba_bounded": (
        {"block_size": 544, "groups": MAMBA, "retention_interval": 0, "num_blocks": 3000},
        "--block-size 544 --mamba-mode align --retention-interval 0 --num-gpu-blocks 3000",
    ),
    "unit32": (
        {"block_size": 544, "groups": MAMBA, "retention_interval": 0, "prefix_match_unit": 32},
        "--block-size 544 --mamba-mode align --retention-interval 0 --prefix-match-unit 32"
        " --num-gpu-blocks 200000",
    ),
    "swa": (
        {
            "block_size": 544,
            "groups": ["full_attention", "sliding_window", "mamba"],
            "retention_interval": 0,
            "sliding_window": 1024,
        },
        "--block-size 544 --mamba-mode align --retention-interval 0 --sliding-window 1024"
        " --num-gpu-blocks 200000",
    ),
    "eagle": (
        {
            "block_size": 544,
            "groups": MAMBA,
            "retention_interval": 0,
            "spec_decode": "eagle_lookahead",
        },
        "--block-size 544 --mamba-mode align --retention-interval 0 --eagle"
        " --num-gpu-blocks 200000",
    ),
}


def make_trace(num_requests: int, seed: int) -> list[np.ndarray]:
    """Prompts of ~2,000 tokens: one of 8 system prompts (1,000 tokens) + a unique user part
    (views of one array, as a replay holds the token ids it loads)."""
    rng = np.random.default_rng(seed)
    systems = [rng.integers(0, 32000, 1000, dtype=np.int32) for _ in range(8)]
    which = rng.integers(0, 8, num_requests)
    lengths = 1000 + rng.integers(-64, 65, num_requests)
    prompts = [
        np.concatenate([systems[w], rng.integers(0, 32000, n, dtype=np.int32)])
        for w, n in zip(which, lengths, strict=True)
    ]
    # held as `hpa replay` holds a trace (access.trace): views of one int32 array
    flat = np.concatenate(prompts)
    ends = np.cumsum([len(p) for p in prompts])
    return [flat[e - len(p) : e] for p, e in zip(prompts, ends.tolist(), strict=True)]


def run_ours(prompts: list[np.ndarray], values: dict) -> tuple[float, list]:
    requests = [SimRequest(f"syn-{i}", p) for i, p in enumerate(prompts)]
    policy = make_policy(values)
    list(replay(requests[:3], policy))  # untimed: loads a compiled kernel, if the layout has one
    started = time.perf_counter()
    results = list(replay(requests, policy))
    return time.perf_counter() - started, results


def run_oracle(trace: Path, flags: str, quiet: bool) -> list[dict]:
    cmd = [str(ORACLE_PYTHON), str(ORACLE_SCRIPT), "--trace", str(trace), *flags.split()]
    cmd += ["--no-chunks"] + (["--quiet"] if quiet else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ORACLE_SCRIPT.parent)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def oracle_figures(trace: Path, flags: str, results: list) -> float:
    """The oracle's replay seconds on the same trace, after checking its per-request results."""
    summary = run_oracle(trace, flags, quiet=True)[-1]
    rows = run_oracle(trace, flags, quiet=False)[:-1]
    mismatches = [
        (r.request_id, mine, theirs)
        for r, o in zip(results, rows, strict=True)
        if (mine := (r.hit_tokens, r.sparse_retention_miss_tokens, r.junction_tokens))
        != (theirs := (o["hit"], o["uncached_common"], o["junction"]))
    ]
    assert not mismatches, f"{len(mismatches)} requests differ, e.g. {mismatches[:3]}"
    print(
        f"  identical per-request results ({len(rows):,} requests, "
        f"{sum(o['hit'] for o in rows):,} hit tokens)",
        flush=True,
    )
    return summary["replay_seconds"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    args = parser.parse_args()
    names = args.layouts.split(",")
    unknown = [n for n in names if n not in LAYOUTS]
    if unknown:
        parser.error(f"unknown layouts {unknown}; known: {', '.join(LAYOUTS)}")
    prompts = make_trace(args.requests, args.seed)
    tokens = sum(len(p) for p in prompts)
    print(f"trace: {len(prompts):,} requests, {tokens:,} prompt tokens")
    oracle = ORACLE_PYTHON.exists() and ORACLE_SCRIPT.exists()
    if not oracle:
        print(f"oracle not found ({ORACLE_PYTHON}, {ORACLE_SCRIPT}): our figures only")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        with trace.open("w") as f:
            for i, p in enumerate(prompts):
                f.write(json.dumps({"request_id": f"syn-{i}", "prompt_token_ids": p.tolist()}))
                f.write("\n")
        for name in names:
            values, flags = LAYOUTS[name]
            print(f"{name}: {values}", flush=True)
            seconds, results = run_ours(prompts, values)
            theirs = oracle_figures(trace, flags, results) if oracle else None
            rows.append((name, seconds, theirs))
    n = len(prompts)
    header = ("layout", "hpa s", "hpa req/s", "vLLM s", "vLLM req/s", "ratio")
    print("{:<15} {:>7} {:>10} {:>7} {:>10} {:>6}".format(*header))
    for name, ours, theirs in rows:
        vllm = f"{theirs:7.3f} {n / theirs:10,.0f} {theirs / ours:5.1f}x" if theirs else ""
        print(f"{name:<15} {ours:7.3f} {n / ours:10,.0f} {vllm}")
    ours_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory: hpa process {ours_mib:,.0f} MiB (trace generation included)")
    if oracle:
        oracle_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"peak memory: vLLM oracle process {oracle_mib:,.0f} MiB")
        print("(vllm: its summary's replay_seconds, start-up and trace loading excluded;")
        print(" targets: >= 10x on the closed form, >= 20x on every layout)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
