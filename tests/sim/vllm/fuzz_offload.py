"""Differential fuzzing of the host KV tier against vLLM 0.33's own OffloadingConnector (a dev
tool, not collected by pytest: it needs the oracle's venv and about 10 s a case).

Each case draws a small trace (conversations of several turns, each turn the previous prompt,
its outputs and a new message; shared system prompts; arrivals a few ms apart), a layout (full
attention alone, + Mamba, + a sliding window), a GPU pool, a host tier (slots, LRU or ARC,
prompt-only or not), a token budget and the schedule; runs `tools/oracle/vllm_offload_oracle.py`
and hpa; and prints every request whose GPU hit, host hit, wait steps or chunks differ (and,
concurrently, its steps to its first tokens or its preemptions):

    .venv/bin/python -m tests.sim.vllm.fuzz_offload --seed 1 --cases 20

`$HPA_ORACLE_PYTHON` locates the oracle's venv (default ~/.cache/hpa-oracle).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import concurrent_replay, replay

ROOT = Path(__file__).resolve().parents[3]
ORACLE = ROOT / "tools/oracle/vllm_offload_oracle.py"
ORACLE_PYTHON = os.environ.get(
    "HPA_ORACLE_PYTHON", str(Path.home() / ".cache/hpa-oracle/bin/python")
)
BLOCK = 16


def draw_trace(rng: random.Random) -> list[dict]:
    systems = [[rng.randrange(50_000) for _ in range(rng.randint(20, 70))] for _ in range(3)]
    convs = [list(rng.choice(systems)) for _ in range(rng.randint(2, 5))]
    out, t = [], 0.0
    for turn in range(rng.randint(2, 4)):
        for c, history in enumerate(convs):
            prompt = history + [rng.randrange(50_000) for _ in range(rng.randint(5, 40))]
            outputs = [rng.randrange(50_000) for _ in range(rng.randint(1, 6))]
            convs[c] = prompt + outputs
            t += rng.choice((0.001, 0.003, 0.006, 0.02))
            out.append(
                {
                    "request_id": f"r{c}{turn}",
                    "prompt_token_ids": prompt,
                    "output_token_ids": outputs,
                    "timestamp": round(t, 6),
                }
            )
    return out


def draw_case(rng: random.Random) -> tuple[list[str], dict]:
    kind = rng.choice(("fa", "mamba", "swa"))
    gpu = rng.choice((12, 16, 24, 40))
    chunks = rng.choice((4, 8, 16, 24, 40, 64, 256))
    policy = rng.choice(("lru", "arc"))
    concurrent = rng.random() < 0.5
    decode = rng.random() < 0.25
    budget = rng.choice((None, None, 32, 48, 64)) if not concurrent else rng.choice((8192, 64))
    args = ["--block-size", str(BLOCK), "--num-gpu-blocks", str(gpu)]
    args += ["--host-chunks", str(chunks), "--eviction-policy", policy]
    hpa = {"engine": "vllm", "block_size": BLOCK, "num_blocks": gpu}
    hpa.update(host_tier_chunks=chunks, host_tier_policy=policy, offload_prompt_only=not decode)
    if kind == "fa":
        args += ["--mamba-mode", "off"]
        hpa["groups"] = ["full_attention"]
    elif kind == "mamba":
        args += ["--mamba-mode", "align"]
        hpa["groups"] = ["full_attention", "mamba"]
    else:
        window = rng.choice((32, 48))
        args += ["--mamba-mode", "off", "--sliding-window", str(window)]
        hpa.update(groups=["full_attention", "sliding_window"], sliding_window=window)
    if budget is not None:
        args += ["--max-num-batched-tokens", str(budget)]
    hpa["max_num_batched_tokens"] = budget
    if concurrent:
        args += ["--concurrent", "--max-num-seqs", "16"]
        hpa.update(schedule="concurrent", async_scheduling=False, max_num_seqs=16)
    if decode:
        args.append("--offload-decode")
    return args, hpa


def run_oracle(trace: list[dict], args: list[str], hash_seed: int = 0) -> list[dict]:
    """The oracle's rows. vLLM walks the ids of the requests finished in a step as a set,
    so with two or more of them their stores go in an order Python's string hashing picks:
    `hash_seed` (PYTHONHASHSEED) fixes it."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in trace))
    try:
        cmd = [ORACLE_PYTHON, str(ORACLE), "--trace", fh.name, *args]
        env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    finally:
        os.unlink(fh.name)
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else "oracle")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return [r for r in rows if not r.get("summary")]


def sim_requests(trace: list[dict]) -> list[SimRequest]:
    """The drawn trace's records as the simulator's requests."""
    return [
        SimRequest(r["request_id"], r["prompt_token_ids"], r["output_token_ids"],
                   timestamp_s=r["timestamp"])
        for r in trace
    ]  # fmt: skip


def fleet_case(seed: int, *, tier: bool = True) -> tuple[dict, list[SimRequest]]:
    """(policy values, requests) of case `seed`, half of the concurrent ones on 2 replicas
    (round robin or prefix-aware); without `tier`, no host tier."""
    rng = random.Random(seed)
    trace = draw_trace(rng)
    _, values = draw_case(rng)
    if not tier:
        values = {k: v for k, v in values.items() if not k.startswith("host_")}
    if values.get("schedule") == "concurrent" and rng.random() < 0.5:
        values.update(replicas=2, routing=rng.choice(("round_robin", "prefix_aware")))
    return values, sim_requests(trace)


def run_hpa(trace: list[dict], hpa: dict) -> list[tuple]:
    requests = sim_requests(trace)
    policy = make_policy(hpa)
    if policy.schedule != "concurrent":
        return [
            (s.request_id, s.hit_tokens, s.host_hit_tokens, s.host_wait_steps, list(s.chunks))
            for s in replay(requests, policy)
        ]
    run = concurrent_replay(policy)
    results = list(run.run(requests))
    return [
        (s.request_id, s.hit_tokens, s.host_hit_tokens, s.host_wait_steps, list(s.chunks),
         f.first_step - f.added[0] if f.first_step is not None else None, s.num_preemptions)
        for f, s in zip(run.flights, results, strict=True)
    ]  # fmt: skip


def expected(rows: list[dict], concurrent: bool) -> list[tuple]:
    out = []
    for r in rows:
        row = (r["request_id"], r["gpu_hit"], r["host_hit"], r["wait_steps"], r["chunks"])
        if concurrent:
            row += (r["delay_steps"], r["preemptions"])
        out.append(row)
    return out


def _differences(got: list[tuple], want: list[tuple]) -> list[tuple]:
    """Requests whose figures differ. One never scheduled (the pool too small): hpa reports
    no counters (its convention), vLLM those of its last try; only that both never ran is
    compared."""
    return [(g, w) for g, w in zip(got, want, strict=True) if g != w and (g[4] or w[4])]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cases", type=int, default=10)
    a = p.parse_args(argv)
    bad = 0
    for k in range(a.cases):
        rng = random.Random(a.seed * 1_000_003 + k)
        trace = draw_trace(rng)
        args, hpa = draw_case(rng)
        try:
            want = expected(run_oracle(trace, args), "--concurrent" in args)
        except RuntimeError as exc:
            print(f"case {k}: oracle failed ({exc}); skipped")
            continue
        got = run_hpa(trace, hpa)
        # A request never scheduled (the pool too small): hpa reports no counters (its
        # convention), vLLM those of its last try; only that both never ran is compared.
        diffs = _differences(got, want)
        seed = 0
        while diffs and seed < 5:  # vLLM's order of the requests finishing in one step
            seed += 1
            rows = expected(run_oracle(trace, args, seed), "--concurrent" in args)
            if not _differences(got, rows):
                print(f"case {k}: equal to vLLM under PYTHONHASHSEED={seed} (not 0)")
                diffs = []
        status = "ok" if not diffs else f"{len(diffs)} requests differ"
        print(f"case {k}: {' '.join(args)}: {status}", flush=True)
        for g, w in diffs[:3]:
            print(f"  hpa    {g}\n  oracle {w}")
        bad += bool(diffs)
    print(f"{bad} of {a.cases} cases differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
