"""Concurrent replay speed: hpa's concurrent vLLM replay against vLLM 0.33's own scheduler
driven on a simulated clock (the oracle's `--concurrent` mode), on the same trace.

Trace (seeded numpy, cached in bench/data/): `--requests` requests (2,000) arriving as a
Poisson process of 7.5 requests/s overall, like the oracle README's concurrent speed table:
new chats on 8 system prompts (800-1,600 tokens) + a user message, multi-turn follow-ups
carrying a recent request's prompt + outputs, bursts of 4-16 requests a few ms apart sharing
a system prompt + a document, and unrelated prompts; about 2,800 prompt tokens a request, 1-119
outputs. Configurations: (a) FA + Mamba align, B = 544, 100,000 blocks; (b) the same with 400
blocks (eviction, preemption); (c) FA only, B = 16, 3,000 blocks. Retention 0, budget 8192,
max_num_seqs 256, time scale 1, a step of 5 ms + 100 us per scheduled token. Both sides run the
same loop: vLLM's async scheduling by default (hpa's `async_scheduling` true, as `vllm serve`
runs; the oracle is `tools/oracle/vllm_async_oracle.py --async-scheduling`, vLLM's
`AsyncScheduler` with two batches in flight), or with `--sync` the synchronous loop on both
(`async_scheduling` false; the oracle's own `--concurrent` mode).

Each contender runs in a fresh process (its peak RSS is its own), `--runs` times (3), in
pairs (hpa, then the oracle: a pair sees about one machine state, and the oracle's own time
moved 1.5x between runs of one session while hpa's did not): hpa's replay time (the trace
already loaded) and the whole process's wall time; the oracle's own `replay_seconds` (its
stderr timing line: start-up and trace loading excluded) and its wall time; medians, and the
ratio of the medians with each pair's. Per-request
results must be identical (hit, uncached_common, junction, attention match, preemptions, hits
over every admission, chunks; arrival, first scheduled, first token and finished times within
1e-6 s). Without the oracle (`$HPA_ORACLE_PYTHON`, default ~/.cache/hpa-oracle/bin/python)
the comparison is skipped and hpa's SERIAL replay of the same trace is the baseline instead.

Then a capacity curve on sample_traces/mixed.jsonl.gz (ingested into a temporary DuckDB; 4
partitions, each its own pool): the useful hit ratio (hit tokens / prompt tokens) of
`run_replay` for several pool sizes, serial against concurrent at time scale 1 and 0.2.

Usage: `python bench/bench_concurrent.py [--requests 2000] [--seed 0] [--runs 3] [--sync]
[--no-curve]`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import run_measured  # noqa: E402

DATA = Path(__file__).parent / "data"
ORACLE_PYTHON = Path(
    os.environ.get("HPA_ORACLE_PYTHON", Path.home() / ".cache/hpa-oracle/bin/python")
)
ORACLE_SCRIPT = Path(
    os.environ.get("HPA_ORACLE_SCRIPT", ROOT.parent / "shared/oracle/vllm_oracle.py")
)
# vLLM's AsyncScheduler driven as `vllm serve` drives it (loads ORACLE_SCRIPT for the rest).
ASYNC_ORACLE = ROOT / "tools" / "oracle" / "vllm_async_oracle.py"
FA, MAMBA = "full_attention", "mamba"
RATE, BURST_SHARE, VOCAB = 7.5, 0.05, 32000
CLOCK = {"max_num_seqs": 256, "step_base_ms": 5.0, "step_token_us": 100.0, "time_scale": 1.0}
CONFIGS = {
    "(a) FA+Mamba align B=544, 100,000 blocks": {"groups": [FA, MAMBA], "block_size": 544},
    "(b) FA+Mamba align B=544, 400 blocks": {
        "groups": [FA, MAMBA],
        "block_size": 544,
        "num_blocks": 400,
    },
    "(c) FA only B=16, 3,000 blocks": {"groups": [FA], "block_size": 16, "num_blocks": 3000},
}
TIMES = ("arrival_s", "first_scheduled_s", "first_token_s", "finished_s")
COUNTS = (
    "hit",
    "uncached_common",
    "junction",
    "attn_match",
    "num_preemptions",
    "hit_total",
    "chunks",
)
CURVE_BLOCKS = (50, 100, 200, 400, 800, None)


def policy_of(config: dict, schedule: str = "concurrent", async_scheduling: bool = True) -> dict:
    values = {
        "engine": "vllm",
        "retention_interval": 0,
        "max_num_batched_tokens": 8192,
        "num_blocks": 100_000,
        **config,
    }
    if schedule != "concurrent":
        return values
    return {**values, "schedule": "concurrent", **CLOCK, "async_scheduling": async_scheduling}


# --------------------------------------------------------------------------------------------
# The trace
# --------------------------------------------------------------------------------------------


def make_trace(num_requests: int, seed: int) -> list[dict]:
    """Records in arrival order (oracle JSONL format, timestamps in seconds)."""
    rng = np.random.default_rng(seed)

    def toks(lo: int, hi: int) -> np.ndarray:
        return rng.integers(0, VOCAB, int(rng.integers(lo, hi + 1)), dtype=np.int32)

    systems = [toks(800, 1600) for _ in range(8)]
    history: list[tuple[np.ndarray, np.ndarray]] = []
    records: list[dict] = []
    t = 0.0
    event_rate = RATE / (1 - BURST_SHARE + BURST_SHARE * 10)  # a burst is 10 on average

    def add(kind: str, prompt: np.ndarray) -> None:
        outputs = rng.integers(0, VOCAB, int(rng.integers(1, 120)), dtype=np.int32)
        history.append((prompt, outputs))
        records.append(
            {
                "request_id": f"c{len(records):05d}-{kind}",
                "timestamp": round(t, 6),
                "prompt_token_ids": prompt.tolist(),
                "output_token_ids": outputs.tolist(),
            }
        )

    while len(records) < num_requests:
        t += float(rng.exponential(1 / event_rate))
        u = float(rng.random())
        if u < BURST_SHARE:
            head = np.concatenate([systems[int(rng.integers(8))], toks(800, 1800)])
            for j in range(min(int(rng.integers(4, 17)), num_requests - len(records))):
                t += float(rng.exponential(0.005)) if j else 0.0
                add("burst", np.concatenate([head, toks(50, 300)]))
            continue
        if u < 0.4 and history:
            prompt, outputs = history[-1 - int(rng.integers(min(20, len(history))))]
            follow_up = np.concatenate([prompt, outputs, toks(100, 600)])
            if len(follow_up) <= 8000:
                add("turn", follow_up)
                continue
        if u < 0.85:
            add("new", np.concatenate([systems[int(rng.integers(8))], toks(650, 2100)]))
        else:
            add("unique", toks(1000, 4000))
    return records


def trace_file(num_requests: int, seed: int) -> Path:
    DATA.mkdir(exist_ok=True)
    path = DATA / f"concurrent_{num_requests}_{seed}.jsonl"
    if not path.exists():
        records = make_trace(num_requests, seed)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
        tmp.replace(path)
    return path


# --------------------------------------------------------------------------------------------
# Contenders, each in a fresh process
# --------------------------------------------------------------------------------------------

# hpa: load the trace (untimed), replay it (timed), then the per-request rows (untimed). The
# process is set up as the `hpa` command's (`analyzer.cli`: OpenBLAS on one thread, the
# cyclic collector every 50,000 allocations) and holds token ids as `hpa replay` loads them
# (int32, `access.trace.TOKEN_DTYPES`): int64 arrays made each request's hashing convert
# its ids first (0.02 s of a 0.45 s replay).
_HPA_CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import analyzer.cli  # noqa: F401  (the process as the `hpa` command sets it up)
import numpy as np
from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import replay
requests = []
with open(sys.argv[2]) as f:
    for line in f:
        r = json.loads(line)
        requests.append(SimRequest(r["request_id"], np.asarray(r["prompt_token_ids"], np.int32),
                                   np.asarray(r.get("output_token_ids") or [0], np.int32),
                                   timestamp_s=r["timestamp"]))
policy = make_policy(json.loads(sys.argv[3]))
start = time.perf_counter()
results = list(replay(requests, policy))
seconds = time.perf_counter() - start
rows = [{"request_id": r.request_id, "arrival_s": r.arrival_s,
         "first_scheduled_s": r.first_scheduled_s, "first_token_s": r.first_token_s,
         "finished_s": r.finished_s, "hit": r.hit_tokens,
         "uncached_common": r.sparse_retention_miss_tokens, "junction": r.junction_tokens,
         "attn_match": r.attention_match_after_spec_tokens,
         "num_preemptions": r.num_preemptions, "hit_total": r.hit_total_tokens,
         "chunks": list(r.chunks), "error": r.error is not None,
         "prompt_tokens": r.prompt_tokens} for r in results]
print(json.dumps({"seconds": seconds, "rows": rows}))
"""

# The oracle's own main() (so its stdout and stderr are the CLI's): argv[1] is the oracle
# script's folder, argv[2] its module (vllm_oracle or vllm_async_oracle).
_ORACLE_CHILD = """
import importlib, sys
sys.path.insert(0, sys.argv[1])
sys.exit(importlib.import_module(sys.argv[2]).main(sys.argv[3:]))
"""


def _measured(cmd: list[str], **kwargs) -> dict:
    """`cmd` through bench.common's launcher: this process holds the trace's records, and a
    process spawned from it would have its peak RSS start at this one's (273 MiB)."""
    done = run_measured(cmd, **kwargs)
    if done["rc"]:
        raise SystemExit(f"{cmd[0]} failed: {done['stderr'].strip()[-500:]}")
    return done


def run_hpa(trace: Path, policy: dict) -> dict:
    done = _measured([sys.executable, "-c", _HPA_CHILD, str(ROOT), str(trace), json.dumps(policy)])
    figures = json.loads(done["stdout"].strip().splitlines()[-1])
    return {**figures, "wall": done["wall_s"], "peak_mib": done["peak_mib"]}


def oracle_args(policy: dict) -> list[str]:
    args = ["--concurrent", "--block-size", str(policy["block_size"])]
    args += ["--async-scheduling"] if policy["async_scheduling"] else []
    args += ["--mamba-mode", "align" if MAMBA in policy["groups"] else "off"]
    args += ["--retention-interval", str(policy["retention_interval"])]
    args += ["--max-num-batched-tokens", str(policy["max_num_batched_tokens"])]
    args += ["--num-gpu-blocks", str(policy["num_blocks"])]
    args += ["--max-num-seqs", str(policy["max_num_seqs"])]
    args += ["--time-scale", repr(policy["time_scale"])]
    args += ["--step-base-ms", repr(policy["step_base_ms"])]
    return args + ["--step-token-us", repr(policy["step_token_us"])]


def run_oracle(trace: Path, policy: dict) -> dict:
    script = ASYNC_ORACLE if policy["async_scheduling"] else ORACLE_SCRIPT
    cmd = [str(ORACLE_PYTHON), "-c", _ORACLE_CHILD, str(script.parent), script.stem]
    cmd += ["--trace", str(trace), *oracle_args(policy)]
    env = {**os.environ, "HPA_ORACLE_SCRIPT": str(ORACLE_SCRIPT)}
    out = _measured(cmd, cwd=ORACLE_SCRIPT.parent, env=env)
    wall, peak = out["wall_s"], out["peak_mib"]
    lines = [json.loads(x) for x in out["stdout"].splitlines() if x.startswith("{")]
    err = [json.loads(x) for x in out["stderr"].splitlines() if x.startswith("{")]
    timing = next(x for x in err if x.get("timing"))
    rows = [x for x in lines if not x.get("summary")]
    summary = next(x for x in lines if x.get("summary"))
    return {
        "seconds": timing["replay_seconds"],
        "setup": timing.get("setup_seconds", timing.get("setup_s", 0.0)),
        "wall": wall,
        "peak_mib": peak,
        "rows": rows,
        "summary": summary,
    }


def differences(ours: list[dict], theirs: list[dict]) -> list[str]:
    out = []
    for mine, want in zip(ours, theirs, strict=True):
        fields = [k for k in COUNTS if mine[k] != want[k]]
        fields += [
            k
            for k in TIMES
            if (mine[k] is None) != (want[k] is None)
            or (mine[k] is not None and abs(mine[k] - want[k]) > 1e-6)
        ]
        if mine["error"] != ("error" in want):
            fields.append("error")
        if fields:
            out.append(f"{want['request_id']}: {', '.join(fields)}")
    return out


def _load(rows: list[dict]) -> str:
    text = f"{sum(r['hit'] for r in rows):,} hit tokens"
    if any(r["finished_s"] is not None for r in rows):  # a serial replay has no clock
        preemptions = sum(r["num_preemptions"] for r in rows)
        makespan = max(r["finished_s"] or 0.0 for r in rows)
        text += f", {preemptions} preemptions, simulated makespan {makespan:.1f} s"
    return text


def bench_config(
    name: str, config: dict, trace: Path, n: int, oracle: bool, runs: int, async_scheduling: bool
) -> tuple[float, bool]:
    """Prints one configuration's rows; returns (median replay-time ratio, per-request
    identical). Each contender runs `runs` times, in pairs (ours, then the baseline), so each
    pair sees about the same machine state; the figures are medians."""
    policy = policy_of(config, async_scheduling=async_scheduling)
    print(f"\n{name}")
    pairs = []
    for _ in range(runs):
        ours = run_hpa(trace, policy)
        base = run_oracle(trace, policy) if oracle else run_hpa(trace, policy_of(config, "serial"))
        pairs.append((ours, base))
    ours, base = pairs[0]
    repeatable = all(o["rows"] == ours["rows"] for o, _ in pairs)
    print(f"  hpa concurrent: {_load(ours['rows'])}")
    if oracle:
        s = base["summary"]
        print(
            f"  vLLM 0.33:      {s['hits']:,} hit tokens, {s['preemptions']} preemptions, "
            f"simulated makespan {s['makespan_s']:.1f} s; {s['steps']:,} steps, "
            f"{s['evicted_blocks']:,} evicted blocks, {s['in_flight_time_mean']} in flight "
            f"(time mean)"
        )
        diff = differences(ours["rows"], base["rows"])
        same = not diff and repeatable
        print(
            f"  per-request results: identical ({n:,} requests)"
            if not diff
            else f"  per-request results: {len(diff)} of {n:,} requests DIFFER, e.g. {diff[:3]}"
        )
        label = "vLLM 0.33 (oracle)"
    else:
        print(f"  hpa serial:     {_load(base['rows'])} (one request at a time: other hits)")
        same, label = repeatable, "hpa serial replay"
    if not repeatable:
        print("  hpa's rows DIFFER between its runs")
    print(
        f"  {'contender':<20} {'replay s (median)':>17} {'min-max':>13} {'req/s':>9} "
        f"{'wall s':>8} {'peak MiB':>9}"
    )
    for who, k in (("hpa concurrent", 0), (label, 1)):
        seconds = [pair[k]["seconds"] for pair in pairs]
        mid = float(np.median(seconds))
        wall = float(np.median([pair[k]["wall"] for pair in pairs]))
        peak = max(pair[k]["peak_mib"] for pair in pairs)
        spread = f"{min(seconds):.3f}-{max(seconds):.3f}"
        print(f"  {who:<20} {mid:17.3f} {spread:>13} {n / mid:9,.0f} {wall:8.2f} {peak:9,.0f}")
    each = [b["seconds"] / o["seconds"] for o, b in pairs]
    ratio = float(np.median([b["seconds"] for _, b in pairs])) / float(
        np.median([o["seconds"] for o, _ in pairs])
    )
    walls = float(np.median([b["wall"] / o["wall"] for o, b in pairs]))
    if oracle:
        print(
            f"  speed ratio hpa/vLLM: {ratio:.1f}x on median replay time (target >= 10x; "
            f"pair by pair {min(each):.1f}-{max(each):.1f}x over {runs} runs), {walls:.1f}x on "
            f"wall time (the oracle's start-up, {base['setup']:.1f} s in its first run, included)"
        )
    else:
        print(f"  concurrent / serial replay time: {1 / ratio:.2f}x (medians of {runs} runs)")
    return ratio, same


# --------------------------------------------------------------------------------------------
# Capacity curve: serial vs concurrent on the mixed sample trace
# --------------------------------------------------------------------------------------------


def capacity_curve() -> None:
    from analyzer.pipeline.replay import run_replay
    from analyzer.sim.dispatch import make_policy
    from analyzer.store.ingest import ingest

    sample = ROOT / "sample_traces" / "mixed.jsonl.gz"
    columns = {
        "serial": {},
        "concurrent, time scale 1": {"time_scale": 1.0},
        "concurrent, time scale 0.2": {"time_scale": 0.2},
    }
    print(
        f"\ncapacity curve: {sample.relative_to(ROOT)}, FA+Mamba align B=544, retention 0, "
        "budget 8192 (4 partitions: 2 revisions x 2 replicas, a pool each)"
    )
    print("useful hit ratio = hit tokens / prompt tokens (concurrent: preemptions in brackets)")
    header = f"  {'num_blocks':>10} " + " ".join(f"{c:>28}" for c in columns)
    print(header)
    seconds = dict.fromkeys(columns, 0.0)
    with tempfile.TemporaryDirectory(prefix="hpa_bench_conc_") as tmp:
        db = Path(tmp) / "mixed.duckdb"
        ingest([sample], db_path=db)
        for blocks in CURVE_BLOCKS:
            cells = []
            for column, clock in columns.items():
                values = {
                    "engine": "vllm",
                    "groups": [FA, MAMBA],
                    "block_size": 544,
                    "retention_interval": 0,
                    "max_num_batched_tokens": 8192,
                    "num_blocks": blocks,
                }
                if clock:
                    values.update({"schedule": "concurrent", **clock})
                outcome = run_replay(make_policy(values), db_path=db)
                seconds[column] += outcome.seconds
                s = outcome.summary
                hit = sum(s.column("hit_tokens").to_pylist())
                prompt = sum(s.column("prompt_tokens").to_pylist())
                cell = f"{100 * hit / prompt:.2f}%"
                if outcome.load is not None:
                    cell += f" ({outcome.load['num_preemptions']})"
                cells.append(cell)
            label = "unbounded" if blocks is None else f"{blocks:,}"
            print(f"  {label:>10} " + " ".join(f"{c:>28}" for c in cells))
    print(
        "  replay seconds, whole column: " + ", ".join(f"{c} {s:.1f}" for c, s in seconds.items())
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-curve", action="store_true", help="skip the capacity curve")
    parser.add_argument(
        "--runs", type=int, default=3, help="paired runs of each contender (medians reported)"
    )
    parser.add_argument(
        "--sync",
        action="store_true",
        help="both sides on the synchronous loop (default: async scheduling on both)",
    )
    args = parser.parse_args()
    trace = trace_file(args.requests, args.seed)
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    prompts = [len(r["prompt_token_ids"]) for r in records]
    outputs = [len(r["output_token_ids"]) for r in records]
    span = records[-1]["timestamp"] - records[0]["timestamp"]
    print(
        f"trace {trace.relative_to(ROOT)}: {len(records):,} requests over {span:.0f} s "
        f"({len(records) / span:.2f} req/s), {sum(prompts):,} prompt tokens (mean "
        f"{np.mean(prompts):,.0f}, {min(prompts):,}-{max(prompts):,}), outputs "
        f"{min(outputs)}-{max(outputs)} (mean {np.mean(outputs):.0f})"
    )
    oracle = ORACLE_PYTHON.exists() and ORACLE_SCRIPT.exists()
    if not oracle:
        print(
            f"oracle not found ({ORACLE_PYTHON}, {ORACLE_SCRIPT}): the comparison with vLLM is "
            "skipped; the baseline is hpa's serial replay of the same trace"
        )
    mode = "synchronous loop" if args.sync else "async scheduling (vLLM's AsyncScheduler)"
    print(f"both sides: {mode}")
    ok = True
    for name, config in CONFIGS.items():
        _, same = bench_config(name, config, trace, len(records), oracle, args.runs, not args.sync)
        ok &= same
    if oracle:
        print(
            "\n(vLLM: its stderr timing line's replay_seconds, start-up and trace loading "
            "excluded; wall: the whole process)"
        )
    if not args.no_curve:
        capacity_curve()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
