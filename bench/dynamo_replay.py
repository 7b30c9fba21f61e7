"""One NVIDIA Dynamo offline replay (DynoSim) of a Mooncake hash-id trace, with hpa's settings.

Runs under Dynamo's own Python, not hpa's (it imports nothing from hpa). Make that venv once,
outside the repository (8 s, 312 MB; the `--no-deps` install skips `aisimulate`, whose sdist
cannot build offline, and which `dynamo.replay.run_trace_replay` does not need):

    python3 -m venv /tmp/dynvenv
    /tmp/dynvenv/bin/pip install --no-deps ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1
    /tmp/dynvenv/bin/pip install pydantic uvloop msgspec numpy

    /tmp/dynvenv/bin/python bench/dynamo_replay.py TRACE --workers 4 --router kv_router \\
        [--block-size 512 --num-blocks 2048 --step-base-ms 30 --step-token-us 18.6] \\
        [--routing-out FILE]

The settings match hpa's `vllm-concurrent` replay (`--set block_size=512 --set num_blocks=2048
--set step_base_ms=30 --set step_token_us=18.6`): vLLM-style engine, `max_num_batched_tokens`
8,192, `max_num_seqs` 256, chunked prefill, prefix caching. Dynamo's step time comes from an
NPZ table (its `dynamo_profile` timing provider, interpolated linearly): prefill = step_token_us
x the step's new prompt tokens, decode = step_base_ms, constant (hpa charges step_base_ms +
step_token_us x every token of the step, so the two differ by step_token_us per decode token).
The table is written to a temporary directory and removed afterwards.

Prints ONE JSON line: workers, router, hit_ratio (Dynamo's
`first_admission_prefix_cache_reused_ratio`: reused prompt tokens of each request's first
admission / prompt tokens, hpa's definition), ttft_p50_s / ttft_p90_s / ttft_p99_s (Dynamo's
own summary percentiles), wall_s (the `run_trace_replay` call, trace parsing included; not the
interpreter's start or imports), requests (completed).

`--routing-out FILE` also writes, as CSV `line,worker,ttft_ms,reused_input_tokens`, the worker
each trace request went to (`line` = 0-based index among the trace's non-blank lines).
Dynamo's per-request report carries no trace index, so its rows are matched to trace lines by
(timestamp, input_length, output_length); rows sharing a key are taken in the order Dynamo
first admitted them, and the JSON line counts the keys whose rows went to different workers
(`routing_ambiguous_keys`: those lines' workers may be swapped).

There is no seed: `kv_router` breaks cost ties at random (Dynamo's Rust selector has a seeded
constructor, but the Python API does not expose it), so two identical kv runs differ slightly.
`round_robin` is deterministic. `DYN_LOG` defaults to `warn` (INFO logging doubles the time).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

MAX_NUM_SEQS = 256
MAX_NUM_BATCHED_TOKENS = 8192
TRACE_BLOCK_SIZE = 512  # Mooncake's hash ids each stand for 512 tokens


def write_linear_npz(path: Path, base_ms: float, token_us: float) -> None:
    """Dynamo's `dynamo_profile` table for a linear step: prefill ms = token_us x tokens (1-D
    linear interpolation, so two points would do; a few keep it readable), decode ITL =
    base_ms over the whole (active KV tokens x context length) grid."""
    import numpy as np

    isl = np.array([0.0, 1024.0, 8192.0, 65536.0, 262144.0])
    np.savez(
        path,
        prefill_isl=isl,
        prefill_ttft_ms=isl * token_us / 1000.0,
        decode_active_kv_tokens=np.array([0.0, 1e7]),
        decode_context_length=np.array([1.0, 1e6]),
        decode_itl=np.full((2, 2), float(base_ms)),
    )


def engine_args(args: argparse.Namespace, npz: Path) -> dict:
    return {
        "engine": {
            "block_size": args.block_size,
            "num_gpu_blocks": args.num_blocks,
            "max_num_seqs": MAX_NUM_SEQS,
            "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
            "timing_model": {
                "type": "external",
                "provider": "dynamo_profile",
                "config": {"path": str(npz)},
            },
        }
    }


def trace_keys(trace: Path) -> list[tuple[float, int, int]]:
    keys = []
    with trace.open() as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                keys.append(
                    (float(row["timestamp"]), int(row["input_length"]), int(row["output_length"]))
                )
    return keys


def match_routing(trace: Path, report: Path) -> tuple[list[tuple], int]:
    """Rows of (line, worker, ttft_ms, reused_input_tokens) in trace order, and the number of
    (timestamp, input, output) keys whose rows went to more than one worker."""
    by_key: dict[tuple, list[dict]] = {}
    with report.open() as handle:
        for line in handle:
            rec = json.loads(line)
            key = (
                float(rec["arrival_time_ms"]),
                int(rec["input_length"]),
                int(rec["requested_output_length"]),
            )
            by_key.setdefault(key, []).append(rec)
    for recs in by_key.values():
        recs.sort(key=lambda r: (r["first_admit_ms"] is None, r["first_admit_ms"] or 0.0))
    ambiguous = sum(
        1 for recs in by_key.values() if len({r["decode_worker_idx"] for r in recs}) > 1
    )
    rows = []
    for index, key in enumerate(trace_keys(trace)):
        recs = by_key.get(key)
        if not recs:
            sys.exit(f"trace line {index} {key}: no row of Dynamo's report matches it")
        rec = recs.pop(0)
        rows.append((index, rec["decode_worker_idx"], rec["ttft_ms"], rec["reused_input_tokens"]))
    return rows, ambiguous


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="a Mooncake hash-id JSONL trace")
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--router", choices=("round_robin", "kv_router"), required=True)
    parser.add_argument("--block-size", type=int, default=512)
    parser.add_argument("--num-blocks", type=int, default=2048)
    parser.add_argument("--step-base-ms", type=float, default=30.0)
    parser.add_argument("--step-token-us", type=float, default=18.6)
    parser.add_argument("--routing-out", type=Path, help="write line,worker,... CSV here")
    args = parser.parse_args()
    if not args.trace.exists():
        sys.exit(f"no trace at {args.trace}")
    os.environ.setdefault("DYN_LOG", "warn")
    from dynamo.replay import run_trace_replay

    with tempfile.TemporaryDirectory(prefix="hpa-dynamo-") as tmp:
        npz = Path(tmp) / "linear_step.npz"
        write_linear_npz(npz, args.step_base_ms, args.step_token_us)
        report = Path(tmp) / "requests.jsonl" if args.routing_out else None
        started = time.perf_counter()
        result = run_trace_replay(
            [str(args.trace)],
            extra_engine_args=engine_args(args, npz),
            num_workers=args.workers,
            router_mode=args.router,
            trace_format="mooncake",
            trace_block_size=TRACE_BLOCK_SIZE,
            report_jsonl_path=str(report) if report else None,
        )
        wall_s = time.perf_counter() - started
        s = result.summary
        out = {
            "workers": args.workers,
            "router": args.router,
            "hit_ratio": s["first_admission_prefix_cache_reused_ratio"],
            "hit_ratio_all_admissions": s["prefix_cache_reused_ratio"],
            "ttft_p50_s": s["median_ttft_ms"] / 1000.0,
            "ttft_p90_s": s["p90_ttft_ms"] / 1000.0,
            "ttft_p99_s": s["p99_ttft_ms"] / 1000.0,
            "wall_s": wall_s,
            "dynamo_wall_time_s": s["wall_time_ms"] / 1000.0,
            "duration_s": s["duration_ms"] / 1000.0,
            "requests": s["completed_requests"],
        }
        if report:
            rows, out["routing_ambiguous_keys"] = match_routing(args.trace, report)
            args.routing_out.parent.mkdir(parents=True, exist_ok=True)
            with args.routing_out.open("w") as handle:
                handle.write("line,worker,ttft_ms,reused_input_tokens\n")
                for line, worker, ttft_ms, reused in rows:
                    handle.write(f"{line},{worker},{ttft_ms!r},{reused}\n")
            out["routing_out"] = str(args.routing_out)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
