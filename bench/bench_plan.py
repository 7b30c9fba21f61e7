"""Capacity planning speed and answers: `hpa plan` against the naive plan a user would script.

The naive plan searches the same settings (retention, match unit, placement, from the
planner's own list) with whole-trace replays only: for each setting, doubling from the
smallest pool a policy can name (2 blocks) to a pool that reaches the target, then bisection
to within the same 5%; no floor found on the heaviest requests alone, no skipping of
settings dearer at their floor, no search started from a like setting's answer. Its answer
is the cheapest setting's pool.

`hpa plan` runs as a whole process (`hpa plan --format json`: start-up included), the naive
plan as a library loop in a fresh process; each with its peak RSS. Both answers are then
checked by a plain replay (`hpa replay`'s library call) at the answer and 0.8x it: the answer
must reach the target and 0.8x must not (or be below the floor).

Traces: the bundled `sample_traces/mixed.jsonl.gz` (always), and when present the public
TraceLab, RAGPulse and WEKA (a folder) traces in ../shared/external_traces/ (ingested into
temporary DuckDB files). Model qwen3-next-80b-a3b, serial schedule.

Usage: `python bench/bench_plan.py [--runs 1] [--only mixed]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import compile_bytecode, measure

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL = ROOT.parent / "shared" / "external_traces"
MODEL = "qwen3-next-80b-a3b"
TRACES = {  # name: (path, target useful hit ratio)
    "mixed": (ROOT / "sample_traces" / "mixed.jsonl.gz", 0.4),
    "tracelab": (EXTERNAL / "tracelab_example" / "round_trace.sanitized.jsonl", 0.5),
    "ragpulse": (EXTERNAL / "ragpulse" / "0_trace.jsonl", 0.1),
    "weka": (EXTERNAL / "weka_claude_code" / "traces", 0.9),
}
HPA = Path(sys.executable).parent / "hpa"

# The naive plan, run in a fresh process by common.measure (DB and TARGET set by setup).
NAIVE = """
import sys
sys.path.insert(0, ".")
from dataclasses import replace
from analyzer.access.inputs import request_input
from analyzer.pipeline.plan.ask import PlanAsk
from analyzer.pipeline.plan.planner import Planner
from analyzer.pipeline.plan.pool import TOLERANCE
from analyzer.pipeline.plan.evaluate import Targets
from analyzer.config.policy import MAXIMUMS, MINIMUMS
from analyzer.executors import as_spec

spec = as_spec(None)
trace = request_input(DB, None).read_only_trace(spec)
planner = Planner(PlanAsk(TARGET, model=MODEL), trace, spec, None)
ev, search = planner.ev, planner.search
cap = MAXIMUMS["num_blocks"]

def meets(policy, n):
    return ev.measure(replace(policy, num_blocks=n)).meets(Targets(TARGET))

best = None
for policy in planner._settings():
    if not ev.measure(replace(policy, num_blocks=None)).meets(Targets(TARGET)):
        continue
    low, hi = MINIMUMS["num_blocks"] - 1, MINIMUMS["num_blocks"]
    while not meets(policy, hi):
        low, hi = hi, min(2 * hi, cap)
    while hi - low > max(1, int(hi * TOLERANCE)):
        mid = (low + hi) // 2
        low, hi = (low, mid) if meets(policy, mid) else (mid, hi)
    cost = search.cost(policy, hi)
    if best is None or cost < best[0]:
        best = (cost, hi, policy.to_json())
result = {"num_blocks": best[1], "cost": best[0], "policy": best[2], "replays": ev.replays}
"""


def ingest(path: Path, db: Path) -> None:
    subprocess.run([str(HPA), "ingest", str(path), "--db", str(db)], check=True,
                   capture_output=True)  # fmt: skip


def hpa_plan(db: Path, target: float) -> dict:
    """`hpa plan` as a process: wall seconds, peak RSS (MiB) and its JSON answer."""
    args = [str(HPA), "plan", "--db", str(db), "--target-useful-hit-ratio", str(target),
            "--model", MODEL, "--format", "json"]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"hpa plan failed on {db}")
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "peak_mib": usage.ru_maxrss / 1024, "result": json.loads(out)}


def check(db: Path, setting: dict, num_blocks: int, target: float) -> tuple[float, str]:
    """The useful hit ratio of a plain replay at `num_blocks` and what one at 0.8x gives."""
    from analyzer.access.inputs import request_input
    from analyzer.pipeline.plan import Evaluator
    from analyzer.pipeline.plan.evaluate import Targets
    from analyzer.sim.dispatch import make_policy

    trace = request_input(db, None).read_only_trace(None)
    ev = Evaluator(trace, None)
    base = {**setting, "model": MODEL}
    at = ev.measure(make_policy({**base, "num_blocks": num_blocks}))
    low = ev.measure(make_policy({**base, "num_blocks": max(1, int(0.8 * num_blocks))}))
    if not at.meets(Targets(target)):
        raise SystemExit(f"{db}: the answer {num_blocks} blocks misses {target}")
    if low.meets(Targets(target)):
        raise SystemExit(f"{db}: 0.8x the answer ({int(0.8 * num_blocks)} blocks) reaches it")
    below = "not schedulable" if not low.schedulable else f"{low.useful_hit_ratio:.3f}"
    return at.useful_hit_ratio, below


def bench(name: str, runs: int) -> list[str]:
    path, target = TRACES[name]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / f"{name}.duckdb"
        ingest(path, db)
        ours = [hpa_plan(db, target) for _ in range(runs)]
        setup = f"DB = {str(db)!r}; TARGET = {target}; MODEL = {MODEL!r}"
        naive = [measure(setup, NAIVE) for _ in range(runs)]
        answer, plain = ours[0]["result"], naive[0]["result"]
        setting = {k: answer[k] for k in ("block_size", "retention_interval",
                                          "prefix_match_unit", "replicas", "routing")}  # fmt: skip
        ratio, below = check(db, setting, answer["num_blocks"], target)
    ours_s = statistics.median(r["seconds"] for r in ours)
    naive_s = statistics.median(r["seconds"] for r in naive)
    return [
        f"{name}, target {target}: hpa plan {answer['num_blocks']:,} blocks "
        f"({answer['total_gib']:.2f} GiB in all, {answer['replays']} replays) in {ours_s:.1f} s, "
        f"peak {max(r['peak_mib'] for r in ours):,.0f} MiB; naive {plain['num_blocks']:,} "
        f"blocks ({plain['cost']:.2f} GiB, {plain['replays']} replays) in {naive_s:.1f} s, "
        f"peak {max(r['peak_mib'] for r in naive):,.0f} MiB; {naive_s / ours_s:.1f}x faster; "
        f"memory naive / hpa {plain['cost'] / answer['total_gib']:.2f}x",
        f"  check: a replay at {answer['num_blocks']:,} blocks gives {ratio:.3f} >= {target}; "
        f"at 0.8x: {below}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--only", choices=sorted(TRACES), default=None)
    args = parser.parse_args()
    compile_bytecode()
    for name in [args.only] if args.only else list(TRACES):
        if not TRACES[name][0].exists():
            print(f"{name}: {TRACES[name][0]} not found, skipped")
            continue
        for line in bench(name, args.runs):
            print(line, flush=True)


if __name__ == "__main__":
    main()
