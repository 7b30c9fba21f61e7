"""Differential fuzzing of the vLLM replay against vLLM 0.33's own scheduler (a dev tool).

Not collected by pytest (it needs the oracle's 2 GB venv and a minute or more). It draws small
random policies (all groups, match units, retention, windows, budgets, pool sizes, group
counts, EAGLE modes) and traces (resends, branches, multi-turn with outputs), replays them
through `oracle/vllm_oracle.py` in one subprocess and through ours, and prints every request
whose hit, miss, junction, attention match, chunks or error differ:

    .venv/bin/python -m tests.sim.vllm.fuzz_oracle --seed 1 --cases 150

`$HPA_ORACLE_PYTHON` / `$HPA_ORACLE_DIR` locate the oracle (defaults: ~/.cache/hpa-oracle,
../shared/oracle). Records without outputs replay with output [0], the token the oracle's
fake model samples.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import replay

ROOT = Path(__file__).resolve().parents[3]
ORACLE_PYTHON = os.environ.get(
    "HPA_ORACLE_PYTHON", str(Path.home() / ".cache/hpa-oracle/bin/python")
)
ORACLE_DIR = Path(os.environ.get("HPA_ORACLE_DIR", ROOT.parent / "shared/oracle"))
FLAGS = {
    "full_attention": "--num-full-groups",
    "mamba": "--num-mamba-groups",
    "sliding_window": "--num-swa-groups",
}

# Runs inside the oracle's venv: every job through a fresh vllm_oracle.Oracle.
BATCH = """
import json, os, sys, warnings
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR"); warnings.filterwarnings("ignore")
import vllm_oracle as vo
out = []
for job in json.load(sys.stdin):
    try:
        args = vo.build_parser().parse_args(["--trace", "-"] + job["args"])
        oracle = vo.Oracle(args, args.max_model_len)
        out.append([oracle.run_request(r) for r in job["trace"]])
    except Exception as exc:
        out.append({"exception": repr(exc)})
print(json.dumps(out))
"""


def random_trace(rng: random.Random, block: int) -> list[dict]:
    records, seqs = [], []
    for i in range(rng.randint(3, 30)):
        how = rng.random() if seqs else 1.0
        if how < 0.5:
            base = rng.choice(seqs)
            cut = rng.choice(
                [
                    rng.randint(0, len(base)),
                    rng.randint(0, len(base) // block) * block + rng.choice([-1, 0, 1]),
                ]
            )
            tail = [rng.randrange(50) for _ in range(rng.randint(0, min(5 * block, 80)))]
            prompt = base[: max(0, min(cut, len(base)))] + tail
        elif how < 0.6:
            prompt = list(rng.choice(seqs))
        else:
            prompt = [rng.randrange(50) for _ in range(rng.randint(1, min(8 * block, 120)))]
        record = {"request_id": f"q{i}", "prompt_token_ids": prompt or [1]}
        if rng.random() < 0.4:
            record["output_token_ids"] = [
                rng.randrange(50) for _ in range(rng.randint(0, min(4 * block, 90)))
            ]
        seqs.append(record["prompt_token_ids"] + record.get("output_token_ids", []))
        records.append(record)
    return records


def random_case(rng: random.Random, dense: bool = False, hybrid: bool = False) -> dict:
    """A random policy and trace; `dense`: one full-attention group, a bounded pool, no
    drafter (what sim/vllm/compiled/dense.py replays); `hybrid`: a sparse group, a bounded pool or
    copies, any drafter (what sim/vllm/compiled/hybrid.py replays)."""
    block = rng.choice([2, 4, 8, 16, 32])
    groups = rng.choice(
        [
            ["full_attention"],
            ["full_attention", "mamba"],
            ["full_attention", "sliding_window"],
            ["full_attention", "sliding_window", "mamba"],
        ]
    )
    if dense:
        groups = ["full_attention"]
    values = {"block_size": block, "groups": groups}
    args = [
        "--block-size",
        str(block),
        "--max-model-len",
        "4096",
        "--mamba-mode",
        "align" if "mamba" in groups else "off",
    ]
    retention = rng.choice([0, None, 2 * block, 3 * block] if len(groups) > 1 else [0, None])
    values["retention_interval"] = retention
    args += ["--retention-interval", "None" if retention is None else str(retention)]
    if len(groups) > 1 and rng.random() < 0.4:
        unit = rng.choice([u for u in (1, 2, block // 4, block // 2) if 1 <= u < block])
        values["prefix_match_unit"] = unit
        args += ["--prefix-match-unit", str(unit)]
    if "sliding_window" in groups:
        values["sliding_window"] = rng.randint(2, 3 * block)
        args += ["--sliding-window", str(values["sliding_window"])]
    if rng.random() < 0.3:
        values["max_num_batched_tokens"] = rng.choice([16, 24, 32, 48])
        args += ["--max-num-batched-tokens", str(values["max_num_batched_tokens"])]
    bounded = dense or rng.random() < 0.5
    if hybrid and "sliding_window" not in groups and "prefix_match_unit" not in values:
        bounded = True  # unbounded, whole blocks, no window: the closed form's (fast.py)
    values["num_blocks"] = rng.randint(4, 80) if bounded else None
    args += ["--num-gpu-blocks", str(values["num_blocks"] or 20000)]
    counts = {}
    copies = not dense and rng.random() < 0.3
    if hybrid and groups == ["full_attention"]:
        copies = True  # one group alone is dense.py's
    if copies:
        counts = {g: rng.choice([1, 1, 2]) for g in groups}
        if groups == ["full_attention"]:
            counts = {"full_attention": 2}
        for g, c in counts.items():
            args += [FLAGS[g], str(c)]
    values["spec_decode"] = rng.choice(["none", "none", "eagle_lookahead", "eagle_drop"])
    if dense:
        values["spec_decode"] = "none"
    args += {
        "none": [],
        "eagle_lookahead": ["--eagle"],
        "eagle_drop": ["--eagle", "--eagle-legacy-drop"],
    }[values["spec_decode"]]
    return {"policy": values, "num_groups": counts, "args": args, "trace": random_trace(rng, block)}


def differences(case: dict, oracle: list | dict) -> list[str]:
    if isinstance(oracle, dict):
        return [f"oracle could not run it: {oracle['exception'][:200]}"]
    requests = [
        SimRequest(r["request_id"], r["prompt_token_ids"], r.get("output_token_ids") or [0])
        for r in case["trace"]
    ]
    ours = replay(requests, make_policy(case["policy"]), num_groups=case["num_groups"] or None)
    out = []
    for want, got in zip(oracle, ours, strict=True):
        a = (
            want["hit"],
            want["uncached_common"],
            want["junction"],
            want["attn_match"],
            want["chunks"],
            "error" in want,
        )
        b = (
            got.hit_tokens,
            got.sparse_retention_miss_tokens,
            got.junction_tokens,
            got.attention_match_after_spec_tokens,
            list(got.chunks),
            got.error is not None,
        )
        if a != b:
            out.append(f"{want['request_id']}: oracle {a} ours {b}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument(
        "--dense", action="store_true", help="only full attention in a bounded pool (dense.py)"
    )
    parser.add_argument(
        "--hybrid",
        action="store_true",
        help="a sparse group, a bounded pool or copies, any drafter (hybrid.py)",
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    cases = [random_case(rng, args.dense, args.hybrid) for _ in range(args.cases)]
    jobs = json.dumps([{"args": c["args"], "trace": c["trace"]} for c in cases])
    done = subprocess.run(
        [ORACLE_PYTHON, "-c", BATCH],
        input=jobs,
        capture_output=True,
        text=True,
        cwd=ORACLE_DIR,
        check=True,
    )
    oracle = json.loads(done.stdout.strip().splitlines()[-1])
    bad = 0
    for i, (case, result) in enumerate(zip(cases, oracle, strict=True)):
        diffs = differences(case, result)
        if diffs:
            bad += 1
            print(f"case {i}: {case['policy']} groups={case['num_groups']}")
            for line in diffs[:4]:
                print("   ", line)
    print(f"{bad}/{len(cases)} cases differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
