#!/usr/bin/env python3
"""Regenerate the host-tier goldens in ``tests/golden/oracle_offload/`` (issue 51 item 3).

    .venv/bin/python tools/oracle/make_offload_goldens.py              # every case
    .venv/bin/python tools/oracle/make_offload_goldens.py --case NAME  # one (repeatable)
    .venv/bin/python tools/oracle/make_offload_goldens.py --check      # compare, write nothing
    .venv/bin/python tools/oracle/make_offload_goldens.py --list
    .venv/bin/python tools/oracle/make_offload_goldens.py --readme     # README.md only

Each case replays a small seeded trace through vLLM 0.33.0's real `Scheduler` with the
`OffloadingConnector` (``tools/oracle/vllm_offload_oracle.py``, run with the oracle's venv,
``$HPA_ORACLE_PYTHON``, default ``~/.cache/hpa-oracle/bin/python``) and stores its per-request
lines as ``<case>.expected.jsonl``; ``cases.json`` gives each case's trace, the GPU side as an
hpa replay policy, the host tier (chunks, eviction policy, prompt-only) and the exact oracle
command; ``README.md`` is rewritten with the per-case totals. Two runs give identical files.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
GOLDEN_REL = "tests/golden/oracle_offload"
GOLDEN = REPO / GOLDEN_REL
DEFAULT_ORACLE_PYTHON = "~/.cache/hpa-oracle/bin/python"
ORACLE = "tools/oracle/vllm_offload_oracle.py"
BLOCK = 16
GPU_BLOCKS = 16  # vLLM num_gpu_blocks: 15 usable (block 0 is the null block)
BIG, MID, SMALL = 256, 24, 8  # host chunks: never full, above the GPU pool, below it


def chat_trace(seed: int = 51) -> list[dict]:
    """16 single-turn requests over 4 system prompts (48-80 tokens) plus a 10-40 token
    message, 2-4 outputs each, arriving every 3 ms (they overlap under --concurrent)."""
    rng = np.random.default_rng(seed)
    systems = [rng.integers(0, 50_000, int(rng.integers(48, 81))) for _ in range(4)]
    out = []
    for i in range(16):
        prompt = np.concatenate(
            [systems[int(rng.integers(4))], rng.integers(0, 50_000, int(rng.integers(10, 41)))]
        )
        outputs = rng.integers(0, 50_000, int(rng.integers(2, 5)))
        out.append(
            {
                "request_id": f"c{i:02d}",
                "prompt_token_ids": prompt.tolist(),
                "output_token_ids": outputs.tolist(),
                "timestamp": round(0.003 * i, 6),
            }
        )
    return out


def turns_trace(seed: int = 52) -> list[dict]:
    """4 conversations of 4 turns, interleaved: a turn's prompt is the previous turn's prompt,
    its outputs and a new 15-30 token message; 3-6 outputs each, every 4 ms."""
    rng = np.random.default_rng(seed)
    history = [rng.integers(0, 50_000, 40).tolist() for _ in range(4)]
    out = []
    for turn in range(4):
        for conv in range(4):
            prompt = history[conv] + rng.integers(0, 50_000, int(rng.integers(15, 31))).tolist()
            outputs = rng.integers(0, 50_000, int(rng.integers(3, 7))).tolist()
            history[conv] = prompt + outputs
            n = len(out)
            out.append(
                {
                    "request_id": f"t{conv}{turn}",
                    "prompt_token_ids": prompt,
                    "output_token_ids": outputs,
                    "timestamp": round(0.004 * n, 6),
                }
            )
    return out


TRACES = {"chat16": chat_trace, "turns16": turns_trace}
# groups -> (oracle flags, hpa policy keys)
GROUPS = {
    "fa": (["--mamba-mode", "off"], {"groups": ["full_attention"]}),
    "mamba": (["--mamba-mode", "align"], {"groups": ["full_attention", "mamba"]}),
    "swa": (
        ["--mamba-mode", "off", "--sliding-window", "32"],
        {"groups": ["full_attention", "sliding_window"], "sliding_window": 32},
    ),
}


def case(
    trace: str,
    groups: str,
    chunks: int,
    policy: str = "lru",
    *,
    concurrent=False,
    gpu_blocks: int = GPU_BLOCKS,
    decode=False,
) -> dict:
    flags, keys = GROUPS[groups]
    args = [
        "--block-size",
        str(BLOCK),
        "--num-gpu-blocks",
        str(gpu_blocks),
        *flags,
        "--host-chunks",
        str(chunks),
        "--eviction-policy",
        policy,
    ]
    hpa = {
        "engine": "vllm",
        **keys,
        "block_size": BLOCK,
        "num_blocks": gpu_blocks,
        "max_num_batched_tokens": None,
    }
    if concurrent:
        args.append("--concurrent")
        hpa.update(
            {
                "schedule": "concurrent",
                "max_num_batched_tokens": 8192,
                "max_num_seqs": 256,
                "step_base_ms": 5.0,
                "step_token_us": 100.0,
                "time_scale": 1.0,
                "async_scheduling": False,
            }
        )
    if decode:
        args.append("--offload-decode")
    return {
        "trace": f"{trace}.trace.jsonl",
        "policy": hpa,
        "host_tier": {
            "chunks": chunks,
            "eviction_policy": policy,
            "blocks_per_chunk": 1,
            "offload_prompt_only": not decode,
        },
        "oracle_args": args,
    }


CASES = {
    "chat_fa_lru_big": case("chat16", "fa", BIG),
    "chat_fa_lru_small": case("chat16", "fa", SMALL),
    "chat_fa_arc_big": case("chat16", "fa", BIG, "arc"),
    "chat_fa_arc_small": case("chat16", "fa", SMALL, "arc"),
    "chat_fa_lru_mid": case("chat16", "fa", MID),
    "chat_fa_arc_mid": case("chat16", "fa", MID, "arc"),
    "turns_fa_lru_mid": case("turns16", "fa", MID),
    "turns_fa_arc_mid": case("turns16", "fa", MID, "arc"),
    "turns_mamba_lru_mid": case("turns16", "mamba", MID),
    "turns_mamba_arc_mid": case("turns16", "mamba", MID, "arc"),
    "chat_fa_lru_big_conc": case("chat16", "fa", BIG, concurrent=True),
    "chat_fa_arc_small_conc": case("chat16", "fa", SMALL, "arc", concurrent=True),
    "chat_fa_lru_gpu_unbounded": case("chat16", "fa", BIG, gpu_blocks=100_000),
    "turns_fa_lru_big": case("turns16", "fa", BIG),
    "turns_fa_lru_big_decode": case("turns16", "fa", BIG, decode=True),
    "turns_fa_arc_small": case("turns16", "fa", SMALL, "arc"),
    "turns_fa_lru_big_conc": case("turns16", "fa", BIG, concurrent=True),
    "chat_mamba_lru_big": case("chat16", "mamba", BIG),
    "chat_mamba_lru_small": case("chat16", "mamba", SMALL),
    "turns_mamba_arc_big": case("turns16", "mamba", BIG, "arc"),
    "turns_mamba_lru_big_conc": case("turns16", "mamba", BIG, concurrent=True),
    "chat_swa_lru_big": case("chat16", "swa", BIG),
    "chat_swa_lru_small": case("chat16", "swa", SMALL),
    "turns_swa_arc_big": case("turns16", "swa", BIG, "arc"),
    "turns_swa_lru_big_conc": case("turns16", "swa", BIG, concurrent=True),
}


def oracle_python() -> str:
    return os.path.expanduser(os.environ.get("HPA_ORACLE_PYTHON") or DEFAULT_ORACLE_PYTHON)


def run_case(name: str, spec: dict) -> list[str]:
    trace = GOLDEN / spec["trace"]
    cmd = [oracle_python(), str(REPO / ORACLE), "--trace", str(trace), *spec["oracle_args"]]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False)
    if done.returncode:
        sys.exit(f"{name}: the oracle failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return [line for line in done.stdout.splitlines() if line.strip()]


def _trace_text(name: str) -> str:
    return "".join(json.dumps(r) + "\n" for r in TRACES[name]())


def _cases_json() -> str:
    cases = {}
    for name, spec in CASES.items():
        args = ["--trace", f"{GOLDEN_REL}/{spec['trace']}", *spec["oracle_args"]]
        cases[name] = {
            **spec,
            "expected": f"{name}.expected.jsonl",
            "oracle_command": f"{DEFAULT_ORACLE_PYTHON} {shlex.join([ORACLE, *args])}",
        }
    data = {
        "about": "Per-request results of vLLM 0.33.0's real Scheduler with the "
        "OffloadingConnector and CPUOffloadingManager (tools/oracle/vllm_offload_oracle.py, "
        "only the worker faked). Regenerate with tools/oracle/make_offload_goldens.py.",
        "oracle": "vllm 0.33.0",
        "notes": {
            "policy": "the GPU side as an hpa replay policy; hpa has no host-tier key yet, "
            "so host_tier holds the connector's settings (chunks = CPUOffloadingManager "
            "num_chunks, pinned by tools/oracle/oracle_offload_spec.py)",
            "expected": "one line per request (gpu_hit, host_hit, wait_steps, delay_steps, "
            "loaded_keys, preemptions, chunks: see the oracle's docstring), then a summary",
        },
        "cases": cases,
    }
    return json.dumps(data, indent=1) + "\n"


def _readme(results: dict[str, list[str]]) -> str:
    rows = []
    for name, lines in results.items():
        summary = json.loads(lines[-1])
        reqs = [json.loads(line) for line in lines[:-1]]
        loaded = sum(r["host_hit"] > 0 for r in reqs)
        rows.append(
            f"| `{name}` | {CASES[name]['host_tier']['chunks']} | "
            f"{summary['prompt_tokens']} | {summary['gpu_hits']} | "
            f"{summary['host_hits']} | {loaded} | {summary['wait_steps']} |"
        )
    table = "\n".join(rows)
    return (
        f"{README_HEAD}\n## Cases\n\n"
        "| case | host chunks | prompt tokens | GPU hit | host hit | requests loading | "
        "wait steps |\n|---|---|---|---|---|---|---|\n"
        f"{table}\n"
    )


README_HEAD = """# vLLM oracle goldens, host KV tier (OffloadingConnector)

Per-request results of **vLLM 0.33.0's own** `Scheduler` with a `KVTransferConfig` for the
`OffloadingConnector` (`kv_role` `kv_both`): vLLM's scheduler-side connector
(`OffloadingConnectorScheduler`) and `CPUOffloadingManager` with its LRU or ARC policy, the
host capacity pinned in chunks by a small out-of-tree spec
(`tools/oracle/oracle_offload_spec.py`, loaded through `spec_name` + `spec_module_path`).
Only the worker is faked: a load completes in the step it is issued, a store in the step
after the one that planned it, a flush in the step that asks, each reported back through the
step's `KVConnectorOutput` (`finished_recving`, `OffloadingWorkerMetadata.completed_jobs`)
as `OffloadingConnectorWorker` reports them. Made by `tools/oracle/make_offload_goldens.py`
with `tools/oracle/vllm_offload_oracle.py`; do not edit by hand.

Files: `chat16.trace.jsonl` (16 single-turn requests over 4 system prompts, 2-4 outputs, one
every 3 ms), `turns16.trace.jsonl` (4 conversations of 4 turns, interleaved, each turn the
previous prompt + its outputs + a new message, one every 4 ms), `<case>.expected.jsonl` (per
request: `gpu_hit` and `host_hit` as vLLM's `PrefillStats` records them at admission
(local and external cached tokens), `wait_steps` in `WAITING_FOR_REMOTE_KVS`, `delay_steps`
from being added to the first scheduled tokens, `loaded_keys` the host keys its load read,
`preemptions`, `chunks`; then a summary), `cases.json` (per case: the trace, the GPU side as
an hpa replay policy, `host_tier` with the connector's settings, the exact oracle command).

Every case: blocks of 16 tokens, one block per chunk, a GPU pool of 16 blocks (15 usable)
unless named `gpu_unbounded`; host tiers of 256 chunks (`big`: never full), 24 (`mid`: above
the GPU pool, evicting) and 8 (`small`: below it). `_conc` cases run the oracle's concurrent
clock (5 ms + 100 us per scheduled token), the others serially (a request is added once the
one before it has finished and every store has completed). `_decode`: `offload_prompt_only`
false.

## Regenerate

```bash
.venv/bin/python tools/oracle/make_offload_goldens.py              # all cases (~4 min)
.venv/bin/python tools/oracle/make_offload_goldens.py --case NAME  # one case (repeatable)
.venv/bin/python tools/oracle/make_offload_goldens.py --check      # verify, write nothing
.venv/bin/python tools/oracle/make_offload_goldens.py --readme     # this file, from the stored ones
```

`HPA_ORACLE_PYTHON` (default `~/.cache/hpa-oracle/bin/python`) names the oracle's venv, as for
`../oracle/`.

## What they pin for the engine work (issue 51 items 1 and 2)

hpa has no host tier yet, so the goldens are not replayed whole;
`tests/sim/vllm/test_offload_goldens.py` holds these rules on every case and request, and the
engine's tier must give these files' numbers request by request:

- A host hit only extends the GPU hit, from a block-aligned GPU hit, in whole chunks, up to
  the prompt (prompt - 1 with a Mamba or sliding-window group).
- A host hit costs one step in `WAITING_FOR_REMOTE_KVS`; the request computes from the next
  step. Under the concurrent clock `delay_steps` adds the queue and deferred lookups.
- A load reads one key per full-attention chunk of the hit, plus one Mamba state per Mamba
  group, plus the window's chunks (2 for a 32-token window) per sliding-window group.
- vLLM's docs say a host tier smaller than the GPU pool adds no hit: it holds on every
  `small` case here (0 host-hit tokens, LRU and ARC, serial and concurrent, all three
  layouts), as does a tier of any size beside a pool that never evicts
  (`chat_fa_lru_gpu_unbounded`).
- LRU and ARC differ once the tier evicts: the `mid` cases (see the table), while `big` and
  `small` give the same figures under both.
- Until the first host load the GPU side is hpa's replay without a tier, request by request
  (hit and chunks): the connector changes nothing before it loads.
- `offload_prompt_only` false offers one more store job on `turns16` and adds no hit there.
- A request the scheduler tries to admit and cannot fit still gets its `PrefillStats` set;
  the oracle reads the stats of the admission that succeeds (they are overwritten at each
  try), which is what vLLM's own metrics report.
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--readme", action="store_true", help="rewrite README.md from the stored files")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(CASES))
        return 0
    if args.readme:
        stored = {n: (GOLDEN / f"{n}.expected.jsonl").read_text().splitlines() for n in CASES}
        (GOLDEN / "README.md").write_text(_readme(stored))
        return 0
    names = args.case or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit(f"unknown case(s): {', '.join(unknown)}")
    GOLDEN.mkdir(parents=True, exist_ok=True)
    files = {GOLDEN / f"{t}.trace.jsonl": _trace_text(t) for t in TRACES}
    files[GOLDEN / "cases.json"] = _cases_json()
    if not args.check:
        for path, text in files.items():
            path.write_text(text)
    results, differ = {}, []
    for name in names:
        results[name] = run_case(name, CASES[name])
        path = GOLDEN / CASES[name].get("expected", f"{name}.expected.jsonl")
        text = "\n".join(results[name]) + "\n"
        if args.check:
            if not path.exists() or path.read_text() != text:
                differ.append(name)
        else:
            path.write_text(text)
        print(f"{name}: {results[name][-1]}", flush=True)
    if not args.check and not args.case:
        (GOLDEN / "README.md").write_text(_readme(results))
    if differ:
        print(f"differ: {', '.join(differ)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
