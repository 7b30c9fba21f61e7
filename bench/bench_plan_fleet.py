"""A latency plan's speed and answer: `hpa plan --ttft-p99` against the search a user would
script.

The naive search asks the same question of the same fleets (the tensor parallels and routers
the plan searches, pools at what the GPUs hold): for each (tensor parallel, router) it
replays 1, 2, 3, ... replicas, every replay to its end, until one meets the targets, and
keeps the fleet with the fewest GPUs. No replay is cut short, none is reused (one replica is
replayed once per router), no bound from a fleet found earlier, no bisection. Its answer is
at the GPUs' pool, so it is compared with `hpa plan`'s in GPUs (hpa also searches the least
pool at that count).

`hpa plan` runs as a whole process (`--format json`: start-up included), the naive search as
a library loop in a fresh process; each with its peak RSS. The plan's answer is then checked
by plain replays (every replay to its end): at the answer it meets every target, and the
fleet one step smaller misses one.

Traces: the bundled `sample_traces/mixed.jsonl.gz` at 50 times its arrival rate (always),
and when present the public Mooncake conversation trace (qwen3-next-80b-a3b on H200, steps
from the roofline, TTFT p99 2 s, useful hit ratio 0.05, up to 8 replicas).

Usage: `python bench/bench_plan_fleet.py [--only mixed] [--naive]` (the naive search on
Mooncake takes about 40 full fleet replays, 5-10 minutes: it runs with --naive only).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import compile_bytecode, measure

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL = ROOT.parent / "shared" / "external_traces"
HPA = Path(sys.executable).parent / "hpa"
MODEL = "qwen3-next-80b-a3b"
# name: (path, hit-ratio target, TTFT p99 target s, extra plan arguments)
TRACES = {
    "mixed": (
        ROOT / "sample_traces" / "mixed.jsonl.gz",
        0.3,
        2.0,
        ["--time-scale", "0.02", "--max-replicas", "16"],
    ),
    "mooncake": (
        EXTERNAL / "mooncake" / "conversation_trace.jsonl",
        0.05,
        2.0,
        ["--max-replicas", "8"],
    ),
}

# The naive search, run in a fresh process by common.measure (DB, TARGET, TTFT, ARGS set).
NAIVE = """
import sys
sys.path.insert(0, ".")
from analyzer.access.inputs import request_input
from analyzer.executors import as_spec
from analyzer.pipeline.plan.ask import PlanAsk
from analyzer.pipeline.plan.planner import PLANNED_ROUTERS, Planner
from analyzer.pipeline.plan.fleet import FleetSearch, Shape
from analyzer.pipeline.plan.pool import floor_blocks
from analyzer.config.policy import MAXIMUMS

spec = as_spec(None)
trace = request_input(DB, None).read_only_trace(spec)
ask = PlanAsk(TARGET, model=MODEL, schedule="concurrent", ttft_p99_s=TTFT, gpu="H200", **ARGS)
planner = Planner(ask, trace, spec, None)
ev = planner.ev
ev.memo_of = lambda policy: None
fs = FleetSearch(planner.search, ev, planner._policy, PLANNED_ROUTERS, ask.max_replicas,
                 priced=planner.priced_tp)
floor = floor_blocks(ev, fs.policy(Shape(None, "round_robin", 1), None), MAXIMUMS["num_blocks"],
                     whole=False)
best = None
for tp in fs.tensor_parallels(floor):
    room = fs.room(tp)
    for routing in PLANNED_ROUTERS:
        for n in range(1, ask.max_replicas + 1):
            ev.memo.clear()
            if ev.measure(fs.policy(Shape(tp, routing, n), room)).meets(planner.targets):
                gpus = fs.gpus(Shape(tp, routing, n))
                if best is None or gpus < best[0]:
                    best = (gpus, tp, routing, n)
                break
result = {"gpus": best and best[0], "shape": best and list(best[1:]), "replays": ev.replays}
"""


def ingest(path: Path, db: Path) -> None:
    subprocess.run([str(HPA), "ingest", str(path), "--db", str(db)], check=True,
                   capture_output=True)  # fmt: skip


def plan_args(db: Path, name: str) -> list[str]:
    _, target, ttft, extra = TRACES[name]
    return [str(HPA), "plan", "--db", str(db), "--target-useful-hit-ratio", str(target),
            "--model", MODEL, "--schedule", "concurrent", "--ttft-p99", str(ttft),
            "--gpu", "H200", "--format", "json", *extra]  # fmt: skip


def hpa_plan(args: list[str]) -> dict:
    """`hpa plan` as a process: wall seconds, peak RSS (MiB) and its JSON answer."""
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"hpa plan failed: {' '.join(args)}")
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "peak_mib": usage.ru_maxrss / 1024, "result": json.loads(out)}


def check(db: Path, name: str, answer: dict) -> str:
    """Plain replays, each to its end: the answer meets the targets, one step smaller not."""
    from analyzer.access.inputs import request_input
    from analyzer.pipeline.plan import Evaluator
    from analyzer.pipeline.plan.evaluate import Targets
    from analyzer.sim.dispatch import make_policy

    _, target, ttft, extra = TRACES[name]
    trace = request_input(db, None).read_only_trace(None)
    targets = Targets(target, ttft)
    ev = Evaluator(trace, None, targets=targets)
    keys = {
        "model": MODEL,
        "schedule": "concurrent",
        "block_size": answer["block_size"],
        "gpu": "H200",
        "tensor_parallel": answer["tensor_parallel"],
        "num_blocks": answer["num_blocks"],
        "routing": answer["routing"],
        "replicas": answer["replicas"],
    }
    if "--time-scale" in extra:
        keys["time_scale"] = float(extra[extra.index("--time-scale") + 1])
    at = ev.measure(make_policy(keys))
    if not at.meets(targets):
        raise SystemExit(f"{name}: the answer misses {at.misses(targets)}")
    said = f"at the answer TTFT p99 {at.load.ttft_p99_s:.3f} s, hit {at.useful_hit_ratio:.3f}"
    if answer["replicas"] > 1:
        smaller = ev.measure(make_policy({**keys, "replicas": answer["replicas"] - 1}))
        if smaller.meets(targets):
            raise SystemExit(f"{name}: one replica fewer meets the targets too")
        said += (
            f"; one replica fewer misses {', '.join(smaller.misses(targets))} (TTFT p99 "
            f"{smaller.load.ttft_p99_s:.3f} s, hit {smaller.useful_hit_ratio:.3f})"
        )
    return said


def bench(name: str, naive: bool) -> list[str]:
    path, target, ttft, extra = TRACES[name]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / f"{name}.duckdb"
        ingest(path, db)
        ours = hpa_plan(plan_args(db, name))
        answer = ours["result"]
        lines = [
            f"{name}, hit {target}, TTFT p99 {ttft} s: hpa plan {answer['total_gpus']} H200 "
            f"({answer['replicas']} x TP{answer['tensor_parallel']}, {answer['routing']}, "
            f"{answer['num_blocks']:,} blocks a replica) in {ours['seconds']:.1f} s, "
            f"{answer['replays']} replays, peak {ours['peak_mib']:,.0f} MiB",
            f"  check: {check(db, name, answer)}",
        ]
        if naive:
            args = {"max_replicas": int(extra[extra.index("--max-replicas") + 1])}
            if "--time-scale" in extra:
                args["time_scale"] = float(extra[extra.index("--time-scale") + 1])
            setup = (
                f"DB = {str(db)!r}; TARGET = {target}; TTFT = {ttft}; MODEL = {MODEL!r}; "
                f"ARGS = {args!r}"
            )
            plain = measure(setup, NAIVE)
            got = plain["result"]
            lines.append(
                f"  naive search: {got['gpus']} H200 {got['shape']} in {plain['seconds']:.1f} s, "
                f"{got['replays']} replays, peak {plain['peak_mib']:,.0f} MiB; hpa "
                f"{plain['seconds'] / ours['seconds']:.1f}x faster"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(TRACES), default=None)
    parser.add_argument("--naive", action="store_true", help="also time the naive search")
    args = parser.parse_args()
    compile_bytecode()
    for name in [args.only] if args.only else list(TRACES):
        if not TRACES[name][0].exists():
            print(f"{name}: {TRACES[name][0]} not found, skipped")
            continue
        naive = args.naive or name == "mixed"
        for line in bench(name, naive):
            print(line, flush=True)


if __name__ == "__main__":
    main()
