"""A fleet of replicas behind a router: hpa's concurrent replay against NVIDIA Dynamo's offline
replay (DynoSim, ai-dynamo 1.6.1) on the Mooncake conversation trace, in the same run.

Both sides replay the same work (docs: ../shared/reference/peer-capacity.md, sections 2-3):
a vLLM-style engine per replica with 512-token blocks, 2,048 blocks a replica,
`max_num_batched_tokens` 8,192, `max_num_seqs` 256, chunked prefill, and a linear step of
30 ms + 18.6 us per token (hpa: `step_base_ms` + `step_token_us` x every token of the step;
Dynamo: the same through its NPZ timing table, prefill 18.6 us x new tokens, decode 30 ms).
For each replica count (2, 4, 8):

- Dynamo: `bench/dynamo_replay.py` under Dynamo's own Python (`--dynamo-python`, default
  $HPA_DYNAMO_PYTHON or /tmp/dynvenv/bin/python), `round_robin` and `kv_router`. Without it,
  the script says how to make that venv and leaves Dynamo's rows out.
- hpa: `hpa replay --policy vllm-concurrent --set async_scheduling=false` (attention only:
  Dynamo's mocker runs one batch at a time, as vLLM's synchronous loop) with each router of
  `--routers` (round_robin, least_loaded, prefix_aware, llm-d, dynamo, sglang, chwbl); a router hpa
  refuses (not written yet, say) is skipped with its one-line error. The trace is ingested
  once into a temporary DuckDB (timed apart); the figures are read back with `hpa query`.

Every contender is a whole process, timed from outside (interpreter start, imports, trace or
store read, results written) with its own peak RSS (`wait4`). Hit ratio = hit tokens of each
request's first admission / prompt tokens (Dynamo's `first_admission_prefix_cache_reused_ratio`);
TTFT percentiles are each tool's own (hpa: DuckDB `quantile_cont`; Dynamo: its summary).
Dynamo's `kv_router` breaks cost ties at random, so its figures move a little between runs
(12.85 vs 13.15 % at 4 replicas); everything else is deterministic. The ratio lines compare
hpa's `dynamo` router with Dynamo's `kv_router`, and round robin with round robin.

    .venv/bin/python bench/bench_fleet.py [--replicas 2 4 8] [--routers round_robin dynamo]
        [--dynamo-python /tmp/dynvenv/bin/python] [--runs 1] [--json-out FILE]
        [--dynamo-routing-dir DIR]

`--dynamo-routing-dir` keeps Dynamo's per-request routing (CSV line,worker,...) of each
kv_router run as DIR/kv_router_N.csv. `--hpa CMD` runs another hpa (e.g. a checkout's
`python -c ...`); default: the `hpa` beside this Python.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import compile_bytecode  # noqa: E402

DEFAULT_TRACE = ROOT.parent / "shared/external_traces/mooncake/conversation_trace.jsonl"
DYNAMO_SCRIPT = Path(__file__).with_name("dynamo_replay.py")
DYNAMO_PYTHON = Path(os.environ.get("HPA_DYNAMO_PYTHON", "/tmp/dynvenv/bin/python"))
DYNAMO_ROUTERS = ("round_robin", "kv_router")
HPA_ROUTERS = ("round_robin", "least_loaded", "prefix_aware", "llm-d", "dynamo", "sglang", "chwbl")
# hpa's router that answers to Dynamo's, for the ratio lines.
PAIRS = {"dynamo": "kv_router", "round_robin": "round_robin"}
STEP = {"block_size": 512, "num_blocks": 2048, "step_base_ms": 30, "step_token_us": 18.6}
# Dynamo's mocker schedules a step once the previous one has run (one batch in flight), as
# vLLM's synchronous loop does; hpa's replay defaults to vLLM's async scheduling (two in
# flight, an arrival first scheduled a step later), so its rows set the synchronous loop.
HPA_ONLY = {"async_scheduling": "false"}
MAKE_VENV = """Dynamo's Python is missing ({path}); its rows are left out. To make it (8 s, 312 MB):
    python3 -m venv /tmp/dynvenv
    /tmp/dynvenv/bin/pip install --no-deps ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1
    /tmp/dynvenv/bin/pip install pydantic uvloop msgspec numpy
then rerun (or pass --dynamo-python)."""
READ_BACK = """
SELECT any_value(r.hit_tokens) AS hit_tokens, any_value(r.prompt_tokens) AS prompt_tokens,
       any_value(r.replay_seconds) AS replay_seconds, count(q.ttft_s) AS requests,
       quantile_cont(q.ttft_s, [0.5, 0.9, 0.99]) AS ttft
FROM replay_runs r JOIN replay_requests q USING (run_id)
WHERE r.run_id = (SELECT max(run_id) FROM replay_runs) AND q.measured
GROUP BY r.run_id
"""


def run_process(cmd: list[str], env: dict | None = None) -> dict:
    """Run `cmd` as a whole process: exit status, stdout, stderr, wall seconds and the peak RSS
    of that process (and any children it waited for), in MiB, from wait4."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {
            "rc": proc.returncode,
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace"),
            "wall_s": wall,
            "peak_mib": usage.ru_maxrss / 1024,
        }


def one_line_error(done: dict) -> str:
    lines = [ln.strip() for ln in (done["stderr"] + done["stdout"]).splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit status {done['rc']}"


def median_runs(runs: list[dict], figures: dict) -> dict:
    """The first run's figures, the median wall time and the largest peak of all runs."""
    return {
        **figures,
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "peak_mib": max(r["peak_mib"] for r in runs),
        "walls_s": [r["wall_s"] for r in runs],
    }


def dynamo_row(args, n: int, router: str) -> dict:
    cmd = [str(args.dynamo_python), str(DYNAMO_SCRIPT), str(args.trace), "--workers", str(n)]
    cmd += ["--router", router, "--block-size", str(STEP["block_size"])]
    cmd += ["--num-blocks", str(STEP["num_blocks"]), "--step-base-ms", str(STEP["step_base_ms"])]
    cmd += ["--step-token-us", str(STEP["step_token_us"])]
    if router == "kv_router" and args.dynamo_routing_dir:
        cmd += ["--routing-out", str(args.dynamo_routing_dir / f"kv_router_{n}.csv")]
    env = {**os.environ, "DYN_LOG": os.environ.get("DYN_LOG", "warn")}
    runs, figures = [], None
    for _ in range(args.runs):
        done = run_process(cmd, env)
        if done["rc"] != 0:
            error = one_line_error(done)
            return {"tool": "dynamo", "router": router, "replicas": n, "error": error}
        runs.append(done)
        result = json.loads(done["stdout"].strip().splitlines()[-1])
        figures = figures or result
        figures.setdefault("hit_ratios", []).append(result["hit_ratio"])
    return {"tool": "dynamo", "replicas": n, **median_runs(runs, figures)}


def hpa_row(args, db: Path, n: int, router: str) -> dict:
    sets = {**STEP, **HPA_ONLY, "replicas": n, "routing": router, "groups": "full_attention"}
    cmd = [*args.hpa, "replay", "--db", str(db), "--policy", "vllm-concurrent"]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    runs = []
    for _ in range(args.runs):
        done = run_process(cmd)
        if done["rc"] != 0:
            error = one_line_error(done)
            return {"tool": "hpa", "router": router, "replicas": n, "error": error}
        runs.append(done)
    query = run_process([*args.hpa, "query", "--db", str(db), "--format", "json", READ_BACK])
    if query["rc"] != 0:
        sys.exit(f"hpa query failed: {one_line_error(query)}")
    got = json.loads(query["stdout"].strip().splitlines()[-1])
    figures = {
        "workers": n,
        "router": router,
        "hit_ratio": got["hit_tokens"] / got["prompt_tokens"],
        "ttft_p50_s": got["ttft"][0],
        "ttft_p90_s": got["ttft"][1],
        "ttft_p99_s": got["ttft"][2],
        "replay_seconds": got["replay_seconds"],
        "requests": got["requests"],
    }
    return {"tool": "hpa", "replicas": n, **median_runs(runs, figures)}


def print_table(rows: list[dict]) -> None:
    print(
        "| replicas | tool | router | hit ratio | TTFT p50 s | TTFT p90 s | TTFT p99 s "
        "| wall s | peak MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['replicas']} | {r['tool']} | {r['router']} | skipped: {r['error']} |||||")
            continue
        print(
            f"| {r['replicas']} | {r['tool']} | {r['router']} | {r['hit_ratio']:.2%} "
            f"| {r['ttft_p50_s']:.3f} | {r['ttft_p90_s']:.3f} | {r['ttft_p99_s']:.3f} "
            f"| {r['wall_s']:.2f} | {r['peak_mib']:.0f} |"
        )


def print_ratios(rows: list[dict], replicas: list[int]) -> None:
    ok = {(r["tool"], r["router"], r["replicas"]): r for r in rows if "error" not in r}
    for n in replicas:
        for ours, theirs in PAIRS.items():
            a, b = ok.get(("hpa", ours, n)), ok.get(("dynamo", theirs, n))
            if a is None or b is None:
                continue
            print(
                f"N={n}: hpa {ours} / Dynamo {theirs}: wall {a['wall_s'] / b['wall_s']:.2f}x "
                f"({a['wall_s']:.2f} / {b['wall_s']:.2f} s), peak "
                f"{a['peak_mib'] / b['peak_mib']:.2f}x, hit {a['hit_ratio']:.2%} vs "
                f"{b['hit_ratio']:.2%} ({(a['hit_ratio'] - b['hit_ratio']) * 100:+.2f} pp), "
                f"TTFT p99 {a['ttft_p99_s']:.3f} vs {b['ttft_p99_s']:.3f} s"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--replicas", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--routers", nargs="+", default=list(HPA_ROUTERS), help="hpa's")
    parser.add_argument("--dynamo-python", type=Path, default=DYNAMO_PYTHON)
    parser.add_argument("--no-dynamo", action="store_true", help="hpa's rows only")
    parser.add_argument("--runs", type=int, default=1, help="runs a contender (median wall)")
    parser.add_argument("--dynamo-routing-dir", type=Path)
    parser.add_argument("--hpa", type=shlex.split, help="command that runs hpa")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    if not args.trace.exists():
        sys.exit(f"no trace at {args.trace}; pass --trace (a Mooncake JSONL trace)")
    args.trace = args.trace.resolve()
    if args.hpa is None:
        args.hpa = [str(Path(sys.executable).with_name("hpa"))]
        compile_bytecode()
    dynamo = not args.no_dynamo and args.dynamo_python.exists()
    if not args.no_dynamo and not dynamo:
        print(MAKE_VENV.format(path=args.dynamo_python), flush=True)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="hpa-fleet-") as tmp:
        db = Path(tmp) / "fleet.duckdb"
        ingest = run_process([*args.hpa, "ingest", str(args.trace), "--db", str(db)])
        if ingest["rc"] != 0:
            sys.exit(f"hpa ingest failed: {one_line_error(ingest)}")
        print(
            f"trace {args.trace.name}; hpa ingest {ingest['wall_s']:.2f} s, "
            f"{ingest['peak_mib']:.0f} MiB (once, not in the rows)",
            flush=True,
        )
        for n in args.replicas:
            if dynamo:
                for router in DYNAMO_ROUTERS:
                    rows.append(dynamo_row(args, n, router))
                    print(f"  dynamo {router} N={n}: done", file=sys.stderr, flush=True)
            for router in args.routers:
                rows.append(hpa_row(args, db, n, router))
                print(f"  hpa {router} N={n}: done", file=sys.stderr, flush=True)
    print_table(rows)
    print_ratios(rows, args.replicas)
    if args.json_out:
        payload = {"trace": str(args.trace), "settings": STEP, "ingest": ingest, "rows": rows}
        for key in ("stdout", "stderr"):
            payload["ingest"].pop(key, None)
        args.json_out.write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
