"""Differential fuzzing of the CONCURRENT vLLM replay against vLLM 0.33's own scheduler.

A dev tool, not collected by pytest (it needs the oracle's 2 GB venv and minutes). Each case
is a seeded random trace and a random layout; the trace goes through the oracle's
`--concurrent` mode (`oracle/vllm_oracle.py`, one real `Scheduler` on a simulated clock) and
through `analyzer.sim.vllm.reference` with `schedule: concurrent`, and every request must agree:

    .venv/bin/python -m tests.sim.vllm.fuzz_concurrent --cases 100 --seed 1 [--jobs 2]
    .venv/bin/python -m tests.sim.vllm.fuzz_concurrent --rerun /tmp/hpa_fuzz_concurrent/s1-c17

Traces: 30-120 requests, Poisson arrivals at 2-40 req/s (bursts a few ms apart, sometimes at
the same instant), families on shared system prompts (some sharing a preamble), multi-turn
follow-ups carrying a recent request's prompt + outputs (the parent may still be decoding),
branches cut near a 16-token boundary, exact resends, unrelated prompts; prompts 50-3,000
tokens, 1-40 outputs, a vocabulary of 8-50 ids. Layouts: FA only (B 16 or 32), FA + Mamba
align (B 64-544, multiples of 16; optionally a prefix_match_unit dividing B) or FA + SWA +
Mamba; retention 0, null or a multiple of B; an unbounded pool (the oracle's 100,000 blocks)
or one small enough to evict, preempt and now and then refuse a request; budget 8192 or
512-4096; max_num_seqs 256 or 4-32; time scale 0.1-10; sometimes another step cost; EAGLE
lookahead in a share of the cases (`--eagle`). A case is drawn from (seed, index) alone.

Compared per request: hit, uncached_common, junction, attn_match (first admission),
num_preemptions, hit_total, chunks, error, and arrival / first scheduled / first token /
finished times (abs 1e-6 s). One line per case, a total at the end; on a mismatch the first
differing request (both sides) is printed and the case is written to `--keep` (trace,
case.json, the oracle command, both sides' rows) for `--rerun`. Exit 1 on any mismatch.

The oracle runs `--jobs` processes (each pays vLLM's ~16 s start-up once) that take one case
at a time; `$HPA_ORACLE_PYTHON` / `$HPA_ORACLE_DIR` locate it (defaults ~/.cache/hpa-oracle,
../shared/oracle). Records without outputs would replay with output [0], the token the
oracle's fake model samples (this generator always gives outputs).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import queue
import random
import shlex
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import replay

ROOT = Path(__file__).resolve().parents[3]
ORACLE_PYTHON = os.environ.get(
    "HPA_ORACLE_PYTHON", str(Path.home() / ".cache/hpa-oracle/bin/python")
)
ORACLE_DIR = Path(os.environ.get("HPA_ORACLE_DIR", ROOT.parent / "shared/oracle"))
FA, SWA, MAMBA = "full_attention", "sliding_window", "mamba"
UNBOUNDED = 100_000  # the oracle's pool for a policy without num_blocks
TIMES = ("arrival_s", "first_scheduled_s", "first_token_s", "finished_s")
COUNTS = (
    "hit",
    "uncached_common",
    "junction",
    "attn_match",
    "num_preemptions",
    "hit_total",
    "chunks",
    "error",
)
MARK = "@@fuzz "

# Runs inside the oracle's venv: reads one case per stdin line, answers one MARK line each,
# doing what `vllm_oracle.py --trace T --concurrent ...` does (main()'s defaults included).
WORKER = r"""
import json, logging, os, shutil, sys, traceback, warnings
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR"); warnings.filterwarnings("ignore")
import vllm_oracle as vo
logging.getLogger("torch").setLevel(logging.ERROR)
MARK = "@@fuzz "
print(MARK + "{}", flush=True)
while True:
    line = sys.stdin.readline()
    if not line:
        break
    job = json.loads(line)
    try:
        args = vo.build_parser().parse_args(["--trace", "-", "--concurrent", *job["args"]])
        recs = job["trace"]
        arrivals = vo.concurrent_arrivals(recs, args.time_scale)
        if args.max_num_batched_tokens is None:
            args.max_num_batched_tokens = 8192
        if args.max_num_seqs is None:
            args.max_num_seqs = 256
        longest = max(len(r["prompt_token_ids"]) + len(r.get("output_token_ids") or [])
                      for r in recs)
        mml = args.max_model_len or max(longest + 1, args.block_size,
                                        args.mamba_block_size or 0)
        if job.get("async"):  # vLLM's AsyncScheduler, tools/oracle/vllm_async_oracle.py
            sys.path.insert(0, job["tools"])
            import vllm_async_oracle as va
            oracle = va.AsyncOracle(args, mml)
        else:
            oracle = vo.Oracle(args, mml)
        try:
            run = oracle.run_async if job.get("async") else oracle.run_concurrent
            rows, summary = run(recs, arrivals)
        finally:
            shutil.rmtree(oracle._tmp, ignore_errors=True)
        out = {"rows": rows, "summary": summary}
    except BaseException as exc:
        out = {"exception": "".join(traceback.format_exception_only(type(exc), exc)).strip()}
    sys.stdout.write(MARK + json.dumps(out) + "\n")
    sys.stdout.flush()
"""


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------


def random_trace(rng: random.Random) -> list[dict]:
    """30-120 records in arrival order (oracle format, timestamps in seconds)."""
    n, rate, vocab = rng.randint(30, 120), rng.uniform(2, 40), rng.choice([8, 10, 16, 50])

    def toks(lo: int, hi: int) -> list[int]:
        return [rng.randrange(vocab) for _ in range(rng.randint(lo, hi))]

    preamble = toks(20, 600)
    systems = [preamble + toks(30, 900) for _ in range(rng.randint(1, 3))]
    systems += [toks(50, 1500) for _ in range(rng.randint(1, 3))]
    history: list[tuple[list[int], list[int]]] = []
    records: list[dict] = []
    t = 0.0

    def add(kind: str, prompt: list[int]) -> None:
        prompt = prompt[:3000]
        if len(prompt) < 50:
            prompt += toks(50 - len(prompt), 50 - len(prompt))
        outputs = toks(1, 40)
        history.append((prompt, outputs))
        records.append(
            {
                "request_id": f"r{len(records):03d}-{kind}",
                "prompt_token_ids": prompt,
                "output_token_ids": outputs,
                "timestamp": round(t, 6),
            }
        )

    kinds = ("new", "turn", "burst", "branch", "resend", "unique")
    while len(records) < n:
        t += rng.expovariate(rate)
        kind = rng.choices(kinds, weights=(28, 32, 8, 10, 7, 15))[0] if history else "new"
        if kind == "burst":
            head = rng.choice(systems) + toks(50, 1000)
            for j in range(min(rng.randint(4, 16), n - len(records))):
                if j:
                    t += 0.0 if rng.random() < 0.3 else rng.expovariate(250)
                add("burst", head + toks(5, 200))
            continue
        recent = history[-1 - rng.randrange(min(12, len(history)))] if history else ([], [])
        if kind == "turn" and len(recent[0]) + len(recent[1]) + 5 <= 3000:
            add(kind, recent[0] + recent[1] + toks(5, 300))
        elif kind == "branch":
            base = rng.choice(history)[0]
            cut = rng.choice(
                [
                    rng.randint(0, len(base)),
                    16 * rng.randint(0, len(base) // 16) + rng.randint(-1, 1),
                ]
            )
            add(kind, base[: max(0, cut)] + toks(1, 300))
        elif kind == "resend":
            add(kind, list(rng.choice(history)[0]))
        elif kind == "unique":
            add(kind, toks(50, rng.choice([1500, 3000])))
        else:
            add("new", rng.choice(systems) + toks(1, 800))
    return records


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n) if n % d == 0]


def _pool(rng: random.Random, trace: list[dict], policy: dict) -> int | None:
    """None (unbounded) or a pool of roughly 0.3-8x the blocks the longest request needs (below
    1x a request can be refused: the oracle aborts it as not schedulable)."""
    if rng.random() < 0.35:
        return None
    B, groups = policy["block_size"], policy["groups"]
    longest = max(len(r["prompt_token_ids"]) + len(r["output_token_ids"]) for r in trace)
    attention = 1 + (SWA in groups)
    need = math.ceil(longest / B + 1) * attention + (3 if MAMBA in groups else 0) + 1
    low, high = rng.choice([(1.0, 2.0), (1.0, 2.0), (2.0, 4.0), (4.0, 8.0), (0.3, 1.0)])
    return max(2, round(need * rng.uniform(low, high)))


def random_layout(rng: random.Random, trace: list[dict], eagle: float) -> dict:
    kind = rng.choice(["fa", "fa_mamba", "fa_mamba", "fa_swa_mamba"])
    if kind == "fa":
        B, groups = rng.choice([16, 32]), [FA]
        retention = rng.choice([0, None])
    else:
        B = 16 * rng.randint(4, 34)
        groups = [FA, MAMBA] if kind == "fa_mamba" else [FA, SWA, MAMBA]
        retention = rng.choice([0, 0, None, B * rng.randint(1, 4)])
    policy = {
        "engine": "vllm",
        "groups": groups,
        "block_size": B,
        "prefix_match_unit": None,
        "retention_interval": retention,
        "sliding_window": None,
        "schedule": "concurrent",
    }
    if kind == "fa_mamba" and rng.random() < 0.35:
        policy["prefix_match_unit"] = rng.choice([d for d in _divisors(B) if d >= 4])
    if SWA in groups:
        policy["sliding_window"] = rng.randint(16, 4 * B)
    policy["max_num_batched_tokens"] = (
        8192 if rng.random() < 0.5 else rng.randint(max(512, B), 4096)
    )
    policy["max_num_seqs"] = 256 if rng.random() < 0.5 else rng.randint(4, 32)
    policy["spec_decode"] = "eagle_lookahead" if rng.random() < eagle else "none"
    policy["time_scale"] = float(f"{10 ** rng.uniform(-1, 1):.3g}")
    policy["step_base_ms"], policy["step_token_us"] = 5.0, 100.0
    if rng.random() < 0.25:
        policy["step_base_ms"] = round(rng.uniform(0.5, 20), 2)
        policy["step_token_us"] = round(rng.uniform(10, 300), 1)
    policy["num_blocks"] = _pool(rng, trace, policy)
    return policy


def oracle_args(policy: dict) -> list[str]:
    """The oracle's flags for `policy` (as tools/oracle/concurrent_cases.Case.oracle_args)."""
    retention = policy["retention_interval"]
    args = ["--block-size", str(policy["block_size"])]
    args += ["--mamba-mode", "align" if MAMBA in policy["groups"] else "off"]
    args += ["--retention-interval", "None" if retention is None else str(retention)]
    if policy["prefix_match_unit"] is not None:
        args += ["--prefix-match-unit", str(policy["prefix_match_unit"])]
    if policy["sliding_window"] is not None:
        args += ["--sliding-window", str(policy["sliding_window"])]
    args += ["--max-num-batched-tokens", str(policy["max_num_batched_tokens"])]
    args += ["--num-gpu-blocks", str(policy["num_blocks"] or UNBOUNDED)]
    if policy["spec_decode"] == "eagle_lookahead":
        args.append("--eagle")
    args += ["--max-num-seqs", str(policy["max_num_seqs"])]
    args += ["--time-scale", repr(policy["time_scale"])]
    args += ["--step-base-ms", repr(policy["step_base_ms"])]
    return args + ["--step-token-us", repr(policy["step_token_us"])]


def make_case(seed: int, index: int, eagle: float, async_scheduling: bool = False) -> dict:
    """Case (seed, index). Async scheduling: the same draws, no drafter (hpa keeps a
    drafter on the synchronous loop)."""
    rng = random.Random(f"fuzz_concurrent:{seed}:{index}")
    trace = random_trace(rng)
    policy = random_layout(rng, trace, 0.0 if async_scheduling else eagle)
    policy["async_scheduling"] = async_scheduling
    return {"name": f"s{seed}-c{index}", "policy": policy, "trace": trace}


def describe(policy: dict) -> str:
    names = {FA: "FA", SWA: f"SWA{policy['sliding_window']}", MAMBA: "M"}
    parts = ["+".join(names[g] for g in policy["groups"]), f"B={policy['block_size']}"]
    if policy["prefix_match_unit"]:
        parts.append(f"unit={policy['prefix_match_unit']}")
    if MAMBA in policy["groups"]:
        retention = policy["retention_interval"]
        parts.append(f"ret={'null' if retention is None else retention}")
    parts.append(f"blocks={policy['num_blocks'] or 'inf'}")
    parts.append(f"budget={policy['max_num_batched_tokens']}")
    parts.append(f"seqs={policy['max_num_seqs']}")
    parts.append(f"ts={policy['time_scale']:g}")
    if (policy["step_base_ms"], policy["step_token_us"]) != (5.0, 100.0):
        parts.append(f"step={policy['step_base_ms']:g}ms+{policy['step_token_us']:g}us")
    if policy["spec_decode"] != "none":
        parts.append("eagle")
    if policy.get("async_scheduling"):
        parts.append("async")
    return " ".join(parts)


# --------------------------------------------------------------------------------------------
# Both sides
# --------------------------------------------------------------------------------------------


def ours(case: dict) -> list[dict]:
    requests = [
        SimRequest(
            r["request_id"],
            r["prompt_token_ids"],
            r.get("output_token_ids") or [0],  # the oracle samples token 0
            timestamp_s=r["timestamp"],
        )
        for r in case["trace"]
    ]
    rows = []
    for got in replay(requests, make_policy(case["policy"])):
        rows.append(
            {
                "request_id": got.request_id,
                **{field: getattr(got, field) for field in TIMES},
                "hit": got.hit_tokens,
                "uncached_common": got.sparse_retention_miss_tokens,
                "junction": got.junction_tokens,
                "attn_match": got.attention_match_after_spec_tokens,
                "num_preemptions": got.num_preemptions,
                "hit_total": got.hit_total_tokens,
                "chunks": list(got.chunks),
                "error": got.error is not None,
            }
        )
    return rows


def _theirs(row: dict) -> dict:
    return {**{k: row.get(k) for k in ("request_id", *TIMES, *COUNTS)}, "error": "error" in row}


def _time_differs(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    return abs(a - b) > 1e-6


def first_difference(want: list[dict], got: list[dict]) -> tuple[int, list[str]] | None:
    """(index, differing fields) of the first request that differs, or None."""
    if [w["request_id"] for w in want] != [g["request_id"] for g in got]:
        return 0, ["request_id"]
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        fields = [k for k in COUNTS if w[k] != g[k]]
        fields += [k for k in TIMES if _time_differs(w[k], g[k])]
        if fields:
            return i, fields
    return None


def _oracle_workers(jobs: int, todo: queue.Queue, done: queue.Queue) -> list[threading.Thread]:
    def work() -> None:
        proc = subprocess.Popen(
            [ORACLE_PYTHON, "-c", WORKER],
            cwd=ORACLE_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )

        def answer() -> dict:
            for line in proc.stdout:
                if line.startswith(MARK):
                    return json.loads(line[len(MARK) :])
            return {"exception": f"oracle process ended (exit {proc.wait()})"}

        answer()  # started (vllm imported)
        while True:
            case = todo.get()
            if case is None:
                break
            started = time.perf_counter()
            job = {"args": oracle_args(case["policy"]), "trace": case["trace"]}
            if case["policy"].get("async_scheduling"):
                job.update({"async": True, "tools": str(ROOT / "tools" / "oracle")})
            proc.stdin.write(json.dumps(job, separators=(",", ":")) + "\n")
            proc.stdin.flush()
            done.put((case, answer(), time.perf_counter() - started))
        proc.stdin.close()
        proc.wait()
        done.put(None)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(jobs)]
    for thread in threads:
        thread.start()
    return threads


def keep(folder: Path, case: dict, want: list[dict], got: list[dict], text: str) -> Path:
    out = folder / case["name"]
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "trace.jsonl"
    trace.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in case["trace"]))
    args = ["--trace", str(trace), "--concurrent", *oracle_args(case["policy"])]
    doc = {"name": case["name"], "policy": case["policy"], "oracle_args": args}
    (out / "case.json").write_text(json.dumps(doc, indent=2) + "\n")
    command = shlex.join([ORACLE_PYTHON, str(ORACLE_DIR / "vllm_oracle.py"), *args])
    (out / "oracle_command.sh").write_text(f"#!/bin/sh\n{command}\n")
    (out / "oracle.jsonl").write_text("".join(json.dumps(r) + "\n" for r in want))
    (out / "ours.jsonl").write_text("".join(json.dumps(r) + "\n" for r in got))
    (out / "difference.txt").write_text(text + "\n")
    return out


def load_kept(folder: Path) -> dict:
    doc = json.loads((folder / "case.json").read_text())
    trace = [json.loads(line) for line in (folder / "trace.jsonl").read_text().splitlines()]
    policy = {"async_scheduling": False, **doc["policy"]}  # kept before the key existed
    return {"name": doc["name"], "policy": policy, "trace": trace}


def judge(case: dict, answer: dict) -> tuple[str, str, dict]:
    """(status, details, figures) of one case: OK, MISMATCH or ORACLE-ERROR."""
    if "exception" in answer:
        return "ORACLE-ERROR", answer["exception"], {}
    want = [_theirs(row) for row in answer["rows"]]
    summary = answer["summary"]
    figures = {
        "requests": len(want),
        "preemptions": summary["preemptions"],
        "in_flight_max": summary["in_flight_max"],
        "evicted": summary["evicted_blocks"],
        "errors": summary["errors"],
    }
    try:
        got = ours(case)
    except Exception as exc:  # noqa: BLE001 - a replay that raises is a mismatch too
        return "MISMATCH", f"our replay raised {exc!r}", figures
    diff = first_difference(want, got)
    if diff is None:
        return "OK", "", {**figures, "want": want, "got": got}
    i, fields = diff
    rec = case["trace"][i] if i < len(case["trace"]) else {}
    lines = [
        f"first differing request #{i} {want[i]['request_id']} (prompt "
        f"{len(rec.get('prompt_token_ids', []))}, outputs {len(rec.get('output_token_ids', []))}, "
        f"timestamp {rec.get('timestamp')}): {', '.join(fields)}",
        f"  oracle: {json.dumps(want[i])}",
        f"  ours:   {json.dumps(got[i])}",
    ]
    per_field: Counter = Counter()
    bad = 0
    for w, g in zip(want, got, strict=False):
        found = first_difference([w], [g])
        bad += found is not None
        per_field.update(found[1] if found else [])
    fields = ", ".join(f"{k} x{v}" for k, v in sorted(per_field.items()))
    lines.append(f"  ({bad} of {len(want)} requests differ; by field: {fields})")
    return "MISMATCH", "\n".join(lines), {**figures, "want": want, "got": got}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=50)
    parser.add_argument("--first", type=int, default=0, help="index of the first case")
    parser.add_argument("--jobs", type=int, default=2, help="oracle processes (default 2)")
    parser.add_argument(
        "--eagle", type=float, default=0.25, help="share of cases with EAGLE (default 0.25)"
    )
    parser.add_argument("--minutes", type=float, default=None, help="start no case after this")
    parser.add_argument(
        "--async-scheduling",
        action="store_true",
        help="vLLM's AsyncScheduler on both sides (tools/oracle/vllm_async_oracle.py)",
    )
    parser.add_argument("--keep", type=Path, default=Path("/tmp/hpa_fuzz_concurrent"))
    parser.add_argument("--rerun", type=Path, action="append", default=[], help="a kept case")
    args = parser.parse_args(argv)
    if not Path(ORACLE_PYTHON).exists():
        parser.error(f"oracle python not found: {ORACLE_PYTHON} (see {ORACLE_DIR}/README.md)")
    if args.rerun:
        count = len(args.rerun)
        cases = (load_kept(folder) for folder in args.rerun)
    else:
        count = args.cases
        indices = range(args.first, args.first + args.cases)
        cases = (  # drawn when sent
            make_case(args.seed, i, args.eagle, args.async_scheduling) for i in indices
        )
    started = time.perf_counter()
    todo: queue.Queue = queue.Queue()
    done: queue.Queue = queue.Queue()
    jobs = max(1, min(args.jobs, count))
    for case in itertools.islice(cases, jobs):
        todo.put(case)
    _oracle_workers(jobs, todo, done)
    totals = {"cases": 0, "requests": 0, "preemptions": 0, "errors": 0, "evicted": 0}
    failed: dict[str, list[str]] = {"MISMATCH": [], "ORACLE-ERROR": []}
    live = jobs
    while live:
        item = done.get()
        if item is None:
            live -= 1
            continue
        out_of_time = args.minutes is not None and time.perf_counter() - started > 60 * args.minutes
        todo.put(None if out_of_time else next(cases, None))
        case, answer, oracle_s = item
        status, details, figures = judge(case, answer)
        totals["cases"] += 1
        for key in ("requests", "preemptions", "errors", "evicted"):
            totals[key] += figures.get(key, 0)
        line = f"{case['name']:>9} {describe(case['policy'])}"
        if figures:
            line += (
                f" | {figures['requests']} req, {figures['preemptions']} preempt, "
                f"{figures['evicted']} evicted, {figures['errors']} err, "
                f"in flight max {figures['in_flight_max']}"
            )
        print(f"{line} | oracle {oracle_s:.1f}s: {status}", flush=True)
        if status != "OK":
            failed[status].append(case["name"])
            print("   " + details.replace("\n", "\n   "), flush=True)
            if status == "MISMATCH":
                kept = keep(
                    args.keep, case, figures.get("want", []), figures.get("got", []), details
                )
                print(f"   kept in {kept}", flush=True)
    elapsed = time.perf_counter() - started
    print(
        f"total: {totals['cases']} cases, {totals['requests']:,} requests, "
        f"{totals['preemptions']:,} preemptions, {totals['evicted']:,} evicted blocks, "
        f"{totals['errors']} refused requests; {len(failed['MISMATCH'])} mismatched, "
        f"{len(failed['ORACLE-ERROR'])} oracle errors; {elapsed:.0f} s"
    )
    for status, names in failed.items():
        if names:
            print(f"{status}: {' '.join(names)}")
    return 1 if any(failed.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
