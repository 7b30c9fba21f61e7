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

The host-tier row (`--host-requests N`, default 1,000; 0 leaves it out): the first N prompts of
the same generator, each with 4 output tokens and one second apart, replayed serially with a
16-token-block GPU pool of 300 blocks (it holds about two requests, so the 8 system prompts are
evicted between their uses) and a host KV tier of 4,096 chunks (LRU, prompt chunks only). hpa
runs as a user runs it, `hpa ingest` then `hpa replay --set host_tier_chunks=4096 ...`, each a
whole process; vLLM 0.33's scheduler with its OffloadingConnector runs as
tools/oracle/vllm_offload_oracle.py, a whole process too (its start-up included: it prints no
replay time of its own). Each process's wall time and peak RSS (wait4); the per-request GPU
hit, host hit and steps waiting for the load must be equal (hpa's from replay_requests: the
GPU's part is hit - host hit).

Without the oracle's Python (`$HPA_ORACLE_PYTHON`, default ~/.cache/hpa-oracle/bin/python)
only our figures are printed. Usage: `python bench/bench_replay.py [--requests 10000]
[--layouts closed,fa16_bounded] [--host-requests 1000]`.
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

import analyzer.cli  # noqa: E402, F401  (the process as the `hpa` command sets it up: its collector)
from analyzer.sim.dispatch import make_policy  # noqa: E402
from analyzer.sim.records import SimRequest  # noqa: E402
from analyzer.sim.vllm import replay  # noqa: E402
from bench.common import run_measured  # noqa: E402

ORACLE_PYTHON = Path(
    os.environ.get("HPA_ORACLE_PYTHON", Path.home() / ".cache/hpa-oracle/bin/python")
)
ORACLE_SCRIPT = Path(
    os.environ.get("HPA_ORACLE_SCRIPT", ROOT.parent / "shared/oracle/vllm_oracle.py")
)
OFFLOAD_ORACLE = ROOT / "tools/oracle/vllm_offload_oracle.py"
HPA = Path(sys.executable).parent / "hpa"
# The host-tier row: the GPU pool (16-token blocks) and the host tier's chunks, to each side.
HOST_POLICY = {
    "block_size": 16,
    "groups": ["full_attention"],
    "num_blocks": 300,
    "host_tier_chunks": 4096,
}
HOST_ORACLE_FLAGS = (
    "--block-size 16 --mamba-mode off --num-gpu-blocks 300 --host-chunks 4096"
    " --eviction-policy lru --no-chunks"
)
HOST_OUTPUT_TOKENS = 4
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


def timed(cmd: list[str]) -> tuple[str, float, float, float]:
    """A whole process: its stdout, wall seconds, CPU seconds (user + system) and its own
    peak RSS in MiB (wait4, through bench.common's launcher: spawned from this process, which
    holds the layouts' trace, a process's peak would start at this one's)."""
    done = run_measured(cmd)
    if done["rc"]:
        raise SystemExit(f"{Path(cmd[1]).name} failed: {done['stderr'].strip()[-500:]}")
    return done["stdout"], done["wall_s"], done["cpu_s"], done["peak_mib"]


def write_host_trace(prompts: list[np.ndarray], path: Path) -> None:
    rng = np.random.default_rng(1)
    with path.open("w") as f:
        for i, p in enumerate(prompts):
            out = rng.integers(0, 32000, HOST_OUTPUT_TOKENS).tolist()
            rec = {"request_id": f"syn-{i}", "timestamp": float(i),
                   "prompt_token_ids": p.tolist(), "output_token_ids": out}  # fmt: skip
            f.write(json.dumps(rec) + "\n")


def hpa_host(trace: Path, tmp: Path) -> tuple[dict, list[tuple[str, float, float, float]]]:
    """hpa ingest + hpa replay with the host tier, each a whole process: per request (GPU
    hit, host hit, wait steps) from the store, and each process's (name, wall s, CPU s,
    MiB)."""
    import duckdb

    db = tmp / "host.duckdb"
    sets = [a for k, v in HOST_POLICY.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    runs = []
    for name, cmd in (
        ("hpa ingest", [str(HPA), "ingest", "--db", str(db), str(trace)]),
        ("hpa replay", [str(HPA), "replay", "--db", str(db), *sets]),
    ):
        _, seconds, cpu, mib = timed(cmd)
        runs.append((name, seconds, cpu, mib))
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute(
        "SELECT request_id, hit_tokens - host_hit_tokens, host_hit_tokens, host_wait_steps "
        "FROM replay_requests ORDER BY arrival_seq"
    ).fetchall()
    con.close()
    return {r[0]: tuple(r[1:]) for r in rows}, runs


def oracle_host(trace: Path) -> tuple[dict, tuple[str, float, float, float]]:
    cmd = [str(ORACLE_PYTHON), str(OFFLOAD_ORACLE), "--trace", str(trace)]
    out, seconds, cpu, mib = timed([*cmd, *HOST_ORACLE_FLAGS.split()])
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert not rows[-1]["errors"], rows[-1]
    per = {r["request_id"]: (r["gpu_hit"], r["host_hit"], r["wait_steps"]) for r in rows[:-1]}
    return per, ("vLLM offload oracle", seconds, cpu, mib)


def host_row(prompts: list[np.ndarray], oracle: bool) -> None:
    """The host-tier row: hpa's whole processes against the offload oracle's (serial)."""
    print(f"host tier: {len(prompts):,} requests, {HOST_POLICY}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "host.jsonl"
        write_host_trace(prompts, trace)
        ours, runs = hpa_host(trace, Path(tmp))
        if oracle:
            theirs, run = oracle_host(trace)
            runs.append(run)
            differ = [(k, v, theirs.get(k)) for k, v in ours.items() if theirs.get(k) != v]
            assert len(theirs) == len(ours) and not differ, f"{len(differ)} differ: {differ[:3]}"
            gpu, host = (sum(v[i] for v in ours.values()) for i in (0, 1))
            print(f"  identical per-request GPU hit, host hit and wait steps ({len(ours):,} "
                  f"requests: {gpu:,} GPU hit, {host:,} host hit tokens)", flush=True)  # fmt: skip
    for name, seconds, cpu, mib in runs:
        print(f"  {name:<20} {seconds:7.2f} s wall {cpu:7.2f} s CPU  peak {mib:,.0f} MiB")
    hpa_s, hpa_cpu = (sum(r[i] for r in runs if r[0].startswith("hpa")) for i in (1, 2))
    if oracle:
        print(f"  hpa (ingest + replay) {hpa_s:.2f} s wall, {hpa_cpu:.2f} s CPU; vLLM's whole "
              f"process / hpa's: {runs[-1][1] / hpa_s:.1f}x wall, {runs[-1][2] / hpa_cpu:.1f}x "
              "CPU")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--host-requests", type=int, default=1000)
    args = parser.parse_args()
    names = [n for n in args.layouts.split(",") if n]  # --layouts '': the host row alone
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
    if args.host_requests:
        host_row(make_trace(args.host_requests, args.seed), oracle and OFFLOAD_ORACLE.exists())
    return 0


if __name__ == "__main__":
    sys.exit(main())
