#!/usr/bin/env python3
"""Regenerate the vLLM-oracle FLEET golden files in ``tests/golden/oracle_fleet/``.

Run with the project's venv from anywhere::

    .venv/bin/python tools/oracle/make_fleet_goldens.py                # every case
    .venv/bin/python tools/oracle/make_fleet_goldens.py --case NAME    # one case (repeatable)
    .venv/bin/python tools/oracle/make_fleet_goldens.py --check        # compare, write nothing
    .venv/bin/python tools/oracle/make_fleet_goldens.py --list
    .venv/bin/python tools/oracle/make_fleet_goldens.py --single-check # fleet of 1 == --concurrent

Each case replays one seeded trace through ``tools/oracle/fleet_oracle.py`` (N real vLLM 0.33.0
schedulers, one per replica, on one simulated clock; the router rules and the clock are written
there), run as a subprocess with the oracle's venv. It writes the trace, ``<case>.expected.jsonl``
(one line per request: replica, simulated times, hit at first admission, what the router read;
then a summary), ``cases.json`` (trace, hpa policy with ``routing``/``replicas``, the exact
command) and ``README.md``. ``--single-check`` replays some concurrent goldens
(``tests/golden/oracle_concurrent``) with a fleet of one replica and checks every per-request
field against them: the fleet clock degenerates to the oracle's ``--concurrent`` loop.

Environment: ``HPA_ORACLE_PYTHON`` (default ``~/.cache/hpa-oracle/bin/python``) and
``HPA_ORACLE_SCRIPT`` (default ``../shared/oracle/vllm_oracle.py``, relative to the repo root).
Everything is seeded: two runs give byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from concurrent_cases import CASES as CONCURRENT_CASES
from concurrent_cases import conc_records
from make_goldens import (
    _SCALAR_LIST,
    DEFAULT_ORACLE_PYTHON,
    DEFAULT_ORACLE_SCRIPT,
    FA,
    MAMBA,
    ORACLE_VERSION,
    REPO,
    _one_line,
    _oracle_env,
    oracle_command,
)

GOLDEN_REL = "tests/golden/oracle_fleet"
GOLDEN = REPO / GOLDEN_REL
FLEET_SCRIPT = "tools/oracle/fleet_oracle.py"
ROUTINGS = ("least_loaded", "dynamo", "llm-d")

# The trace: concurrent_cases.conc_records (system prompts sharing a preamble, multi-turn
# follow-ups carrying a recent request's prompt + outputs, bursts of 4-16 sharing a document,
# unique prompts), denser than mix150 so that 2 and 4 replicas both queue.
SEED, NUM_REQUESTS, RATE = 5, 100, 30.0
TRACE = f"fleet{NUM_REQUESTS}"
TRACE_FILE = f"{TRACE}.trace.jsonl"
TRACE_DESCRIPTION = (
    f"seeded (concurrent_cases.conc_records, seed {SEED}, vocab 10): {NUM_REQUESTS} requests, "
    f"Poisson arrivals at {RATE:g}/s (gaps >= 2 ms) over 2.08 s, 5 system prompts (3 share a "
    "preamble), multi-turn follow-ups carrying a recent request's prompt + outputs, bursts of "
    "4-16 sharing system + document, unique prompts; prompts 219-2,192 tokens, 1-60 outputs"
)
# Single-replica self-check: concurrent goldens a fleet of one must reproduce field for field.
SINGLE_CHECK = (
    "mix150_b16_fa_blocks250",
    "mix150_b544_blocks60",
    "conc_preempt_b544_blocks12",
    "fuzz_s11_c4_b112_blocks40",
)
SINGLE_FIELDS = (
    "request_id",
    "arrival_s",
    "first_scheduled_s",
    "first_token_s",
    "finished_s",
    "num_prompt_tokens",
    "num_output_tokens",
    "queried",
    "hit",
    "uncached_common",
    "junction",
    "num_preemptions",
    "hit_total",
)
REQUEST_FIELDS = (*SINGLE_FIELDS[:1], "replica", *SINGLE_FIELDS[1:], "view", "error")


@dataclass(frozen=True)
class Case:
    name: str
    description: str
    routing: str
    replicas: int
    block_size: int
    num_blocks: int
    groups: tuple[str, ...] = (FA, MAMBA)
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    step_base_ms: int = 5
    step_token_us: int = 100
    time_scale: float = 1.0

    def policy(self) -> dict:
        policy = {
            "engine": "vllm",
            "groups": list(self.groups),
            "block_size": self.block_size,
            "prefix_match_unit": None,
            "retention_interval": 0,
            "sliding_window": None,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "num_blocks": self.num_blocks,
            "spec_decode": "none",
            "schedule": "concurrent",
            "max_num_seqs": self.max_num_seqs,
            "step_base_ms": self.step_base_ms,
            "step_token_us": self.step_token_us,
            "time_scale": self.time_scale,
            # the fleet oracle drives each replica's scheduler synchronously
            "async_scheduling": False,
            "routing": self.routing,
            "replicas": self.replicas,
            "router_seed": None,
            "router_refresh_s": 0.0,
        }
        if self.routing == "llm-d":
            policy["llmd_prefix"] = "precise"
        return policy

    def oracle_args(self, trace_path: str | None = None) -> list[str]:
        return [
            "--trace",
            trace_path or f"{GOLDEN_REL}/{TRACE_FILE}",
            "--replicas",
            str(self.replicas),
            "--routing",
            self.routing,
            "--block-size",
            str(self.block_size),
            "--mamba-mode",
            "align" if MAMBA in self.groups else "off",
            "--retention-interval",
            "0",
            "--max-num-batched-tokens",
            str(self.max_num_batched_tokens),
            "--num-gpu-blocks",
            str(self.num_blocks),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--time-scale",
            str(self.time_scale),
            "--step-base-ms",
            str(self.step_base_ms),
            "--step-token-us",
            str(self.step_token_us),
        ]

    def command(self) -> str:
        return oracle_command(FLEET_SCRIPT, self.oracle_args())


def _cases() -> list[Case]:
    # Pools from a scan of this trace: every bounded case evicts; a few preempt.
    layouts = (
        ("b16_fa", "FA only, B=16", 16, (FA,), {2: 600, 4: 300}),
        ("b544", "FA+Mamba align, B=544, retention 0", 544, (FA, MAMBA), {2: 100, 4: 60}),
    )
    out = []
    for tag, what, block, groups, pools in layouts:
        for replicas in (2, 4):
            for routing in ROUTINGS:
                out.append(
                    Case(
                        f"{TRACE}_{tag}_r{replicas}_{routing.replace('-', '')}",
                        f"{routing}, {replicas} replicas, {what}, {pools[replicas]} blocks each",
                        routing,
                        replicas,
                        block,
                        pools[replicas],
                        groups,
                    )
                )
    for routing in ROUTINGS:  # no eviction: routing and the clock alone
        out.append(
            Case(
                f"{TRACE}_b16_fa_r4_{routing.replace('-', '')}_unbounded",
                f"{routing}, 4 replicas, FA only, B=16, unbounded pools",
                routing,
                4,
                16,
                100_000,
                (FA,),
            )
        )
    return out


CASES: dict[str, Case] = {c.name: c for c in _cases()}


def trace_text() -> str:
    records = conc_records(SEED, NUM_REQUESTS, RATE)
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)


# --------------------------------------------------------------------------------------------
# Running the fleet oracle
# --------------------------------------------------------------------------------------------


def _run(args: list[str], python: str, script: str, name: str) -> tuple[list, dict, dict]:
    """(per-request rows, summary, config) of one fleet_oracle.py run."""
    cmd = [python, str(REPO / FLEET_SCRIPT), "--oracle-script", script, *args]
    proc = subprocess.run(cmd, cwd=REPO, env=_oracle_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.splitlines()[-20:])
        raise RuntimeError(f"fleet oracle failed for {name} (rc {proc.returncode}):\n{tail}")
    config = {}
    for line in proc.stderr.splitlines():
        if line.startswith('{"config"'):
            config = json.loads(line)["config"]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    if not rows or not rows[-1].get("summary"):
        raise RuntimeError(f"fleet oracle output of {name} has no summary line")
    return rows[:-1], rows[-1], config


def expected_lines(rows: list[dict], summary: dict, config: dict) -> str:
    out = []
    for row in rows:
        unknown = set(row) - set(REQUEST_FIELDS)
        if unknown:
            raise RuntimeError(f"unexpected fleet oracle field(s) {sorted(unknown)}")
        out.append(json.dumps(row, separators=(",", ":")))
    out.append(json.dumps({**summary, "oracle_config": config}, separators=(",", ":")))
    return "\n".join(out) + "\n"


def single_check(python: str, script: str) -> list[str]:
    """Concurrent goldens replayed by a fleet of one; the fields that differ (none expected)."""
    gold = REPO / "tests/golden/oracle_concurrent"
    problems = []

    def one(name: str) -> list[str]:
        case = CONCURRENT_CASES[name]
        args = [*case.oracle_args(), "--replicas", "1", "--routing", "least_loaded"]
        rows, _, _ = _run(args, python, script, name)
        lines = (gold / f"{name}.expected.jsonl").read_text().splitlines()
        want = [w for w in map(json.loads, lines) if not w.get("summary")]
        bad = [
            f"{name} {w['request_id']} {k}: {w.get(k)} != {g.get(k)}"
            for w, g in zip(want, rows, strict=True)
            for k in SINGLE_FIELDS
            if w.get(k) != g.get(k)
        ]
        print(f"single-check {name}: {len(want) - len(bad)}/{len(want)} equal", file=sys.stderr)
        return bad

    with ThreadPoolExecutor(max_workers=2) as pool:
        for bad in pool.map(one, SINGLE_CHECK):
            problems += bad
    return problems


# --------------------------------------------------------------------------------------------
# cases.json and README.md
# --------------------------------------------------------------------------------------------

NOTES = {
    "paths": "trace and expected are file names inside tests/golden/oracle_fleet/; "
    "oracle_command and oracle_args run from the repository root (python = "
    "$HPA_ORACLE_PYTHON, default shown; the shared oracle file = $HPA_ORACLE_SCRIPT).",
    "expected": "one JSON line per request in trace order: request_id, replica (index), "
    "arrival_s, first_scheduled_s, first_token_s, finished_s (simulated seconds from the "
    "earliest arrival, rounded to 1 ns), num_prompt_tokens, num_output_tokens, queried, hit, "
    "uncached_common, junction (at the first admission), num_preemptions, hit_total (every "
    "admission), view (what the router read for every replica: least_loaded [waiting, "
    "running, kv usage rounded to 1e-6, inflight]; dynamo [overlap_blocks, "
    "active_prefill_tokens before this request, active_blocks + new_blocks]; llm-d "
    "[waiting, free_blocks, overlap_blocks]); then a summary "
    "line with per-replica totals and oracle_config. No wall-clock timings.",
    "policy": "the concurrent goldens' policy keys plus routing, replicas, router_seed null "
    "(ties to the lowest replica index), router_refresh_s 0 (the router reads the replicas "
    "at the arrival instant) and, for llm-d, llmd_prefix precise (the prefix scorer reads "
    "each replica's real pool). num_blocks is per replica.",
    "clock": "see tools/oracle/fleet_oracle.py: at equal times every step end, then "
    "arrivals (routed one by one in arrival order, add_request at once), then step starts; "
    "each replica runs vllm_oracle.py's --concurrent loop; first-token and finish hooks fire "
    "when the step end that samples the token is processed.",
    "routers": "least_loaded (vLLM 0.33.0 DPLBAsyncMPClient.get_core_engine_for_request): "
    "scan from a start index rotating by one per routed request, score max(inflight, waiting "
    "+ running) + waiting x 6 x max(0, kv usage - 0.5) if waiting, first strictly lowest "
    "wins; counts exact at the arrival, inflight +1 routed / -1 finished. dynamo (Dynamo "
    "1.6.1 lib/kv-router, defaults): argmin max(0, (active_prefill_tokens + ISL) / "
    "block_size - overlap_blocks) + active_blocks + new_blocks; a routed request adds ISL - "
    "overlap_blocks x block_size on its worker until its first token. llm-d (default "
    "profile, precise prefix): argmax 2 x queue + 2 x (1 - kv usage) + 3 x prefix. Ties to "
    "the lowest index. Details and upstream citations in README.md and fleet_oracle.py.",
}


def cases_json() -> str:
    doc = {
        "about": "Golden per-request results of a fleet of vLLM 0.33.0 Schedulers (one real "
        "Scheduler + KVCacheManager per replica) on one simulated clock, with router rules "
        "written in tools/oracle/fleet_oracle.py. Regenerate with `python "
        "tools/oracle/make_fleet_goldens.py`.",
        "oracle": ORACLE_VERSION,
        "trace_seed": {
            "generator": "concurrent_cases.conc_records",
            "seed": SEED,
            "num_requests": NUM_REQUESTS,
            "rate": RATE,
            "vocab": 10,
        },
        "notes": NOTES,
        "cases": {
            c.name: {
                "description": c.description,
                "trace": TRACE_FILE,
                "expected": f"{c.name}.expected.jsonl",
                "policy": c.policy(),
                "oracle_args": c.oracle_args(),
                "oracle_command": c.command(),
            }
            for c in CASES.values()
        },
    }
    return _SCALAR_LIST.sub(_one_line, json.dumps(doc, indent=2)) + "\n"


README_HEAD = """\
# vLLM oracle goldens, fleet of replicas behind a router

Golden per-request results of a **fleet** of vLLM 0.33.0 schedulers: one real v1 `Scheduler`
(with its own `KVCacheManager`, coordinator and `BlockPool`) per replica, all on one simulated
clock, each arrival routed by a router rule. Generated by `tools/oracle/make_fleet_goldens.py`
with `tools/oracle/fleet_oracle.py`; do not edit by hand.

What is vLLM's own code: every replica's scheduling, chunking, admission, preemption, prefix
cache and eviction (built by `../shared/oracle/vllm_oracle.py`'s `Oracle`, as `--concurrent`
builds its one scheduler). What is written in `fleet_oracle.py`: the clock that interleaves the
replicas and the three router rules below, each written from the upstream code named with it,
never imported from hpa.

Clock: each replica runs the `--concurrent` loop (a step started at c ends at c + 5 ms +
100 us per scheduled token). At equal times every step end is processed first, then the
arrivals (each routed as it comes and `add_request`-ed to its replica at once), then the step
starts; an idle replica starts a step at the arrival time of the request routed to it. The
router reads each replica after its step ends <= t and step starts < t. Router hooks fire at
the step end that samples a request's first token and the one that samples its last token
(an aborted request finishes at the abort). A fleet of one reproduces the concurrent goldens
field for field (`--single-check`).

## Router rules

Nothing is random: where upstream breaks ties at random (Dynamo, llm-d), the oracle takes the
lowest replica index, as hpa does with `router_seed: null`. Every router reads the replicas
exactly at the arrival instant (hpa's `router_refresh_s: 0`).

- **least_loaded** = vLLM 0.33.0's data-parallel load balancer,
  `vllm/v1/engine/core_client.py` `DPLBAsyncMPClient.get_core_engine_for_request` (one
  client: `client_count` 1, `client_index` 0). Replicas are scanned from `eng_start_index`
  (0 at start, +1 mod n after every routed request); per replica
  `score = max(inflight, waiting + running)`, plus `waiting * 6.0 * max(0, kv_usage - 0.5)`
  when `waiting > 0`; the first replica whose score is strictly lower than all before it in
  the scan wins. `waiting`, `running`, `kv_usage` are what the DP coordinator would publish
  from `Scheduler.make_stats()` (`num_waiting_reqs` = waiting + KV-holding waiting -
  deferred, `num_running_reqs`, `kv_cache_manager.usage`), taken exact at routing time.
  `inflight` is the client's `engine_inflight`: +1 at dispatch, -1 when the request shows up
  in `finished_requests` (`process_engine_outputs`), i.e. at its last token. The client's
  optimistic `current_counts[eng_index][0] += client_count` only patches a stale snapshot
  until the coordinator's next one replaces it; with exact counts every routing reads a
  fresh snapshot that already contains every routed request, so it is not modelled.
- **dynamo** = NVIDIA Dynamo 1.6.1's KV router with its default `KvRouterConfig`
  (`lib/kv-router`): overlap credit 1, prefill load scale 1, temperature 0, no host/disk
  tiers, no credit decay, active-request weight 0, `router_prefill_load_model` "none",
  output blocks not tracked. Per replica w (`scheduling/selector/mod.rs`
  `WorkerSelectionInput::row`, `scheduling/selector/default.rs` `worker_logit`):
  `logit = max(0, (active_prefill_tokens + ISL) / block_size - overlap_blocks) +
  active_blocks + new_blocks` (float division, no ceil); lowest logit wins.
  `overlap_blocks`: the leading full prompt blocks whose hash is cached in w's `BlockPool`
  (Dynamo's KV-event index, here read without lag). `active_prefill_tokens`: each request
  routed to w adds its effective prefill tokens `ISL - overlap_blocks * block_size` on w
  (`prefill_load_hint_for` / `prefill_load::effective_prefill_tokens`, nothing when 0) and
  they leave at its first token (`mark_prefill_completed`) or its finish (`free`); no decay
  (`sequences/prefill_tracker.rs`). `active_blocks`: w's distinct active prompt block
  hashes, full blocks only (`sequences/block_tracker.rs`; `compute_block_hash_for_seq`
  hashes exact chunks); `new_blocks`: the request's full prompt blocks minus the length of
  its leading run already active on w (`sequences/prompt_registry.rs`
  `additional_active_blocks`). The partial last block is not counted (it only enters
  `potential_decode_blocks_after_admission`, used for queueing, not for the logit).
- **llm-d** = the llm-d Router (EPP) default profile with the precise prefix scorer
  (llm-d/llm-d-inference-scheduler `pkg/epp/config/loader/defaults.go` and the queue,
  kv-cache-utilization and prefix scorers): argmax of `2.0 * queue + 2.0 * kv + 3.0 *
  prefix`; queue = `(max - waiting) / (max - min)` over the replicas (1.0 when all are
  equal); kv = `1 - kv_cache_manager.usage`; prefix = `min(1, overlap_blocks /
  full_prompt_blocks)` (0 without a full block).

Files: `fleet100.trace.jsonl` (`request_id`, `prompt_token_ids`, `output_token_ids`,
`timestamp`), `<case>.expected.jsonl` (per request: `replica`, simulated times, hit at first
admission, `view` = what the router read; then a summary with per-replica totals and
`oracle_config`), `cases.json` (per case: trace, hpa policy with `routing`, `replicas`,
`router_seed: null`, and the exact command).

## Regenerate

```bash
.venv/bin/python tools/oracle/make_fleet_goldens.py                # all cases, 2 at a time
.venv/bin/python tools/oracle/make_fleet_goldens.py --case NAME    # one case (repeatable)
.venv/bin/python tools/oracle/make_fleet_goldens.py --check        # verify, write nothing
.venv/bin/python tools/oracle/make_fleet_goldens.py --single-check # fleet of 1 == --concurrent
```

The oracle venv is that of `../oracle/README.md` (`~/.cache/hpa-oracle`). Each run costs
about 15 s of vLLM/torch start-up and replica set-up and under a second of replay: all 15
cases take about 2 minutes with the default 2 jobs on a 2-core machine.
"""


def _row(c: Case, s: dict | None) -> str:
    layout = "+".join({FA: "FA", MAMBA: "M"}[g] for g in c.groups) + f" B={c.block_size}"
    blocks = "unbounded" if c.num_blocks >= 100_000 else str(c.num_blocks)
    head = f"| `{c.name}` | {c.routing} | {c.replicas} | {layout} | {blocks} "
    if s is None:
        return head + "| ? " * 7 + "|"
    routed = "/".join(str(r["requests_routed"]) for r in s["per_replica"])
    waiting = "/".join(str(r["waiting_max"]) for r in s["per_replica"])
    return head + (
        f"| {routed} | {s['hits']:,} | {s['preemptions']} | {s['evicted_blocks']:,} | "
        f"{waiting} | {s['makespan_s']} | {s['errors']} |"
    )


def readme(summaries: dict[str, dict | None]) -> str:
    lines = [README_HEAD, "## Trace", "", f"`{TRACE_FILE}`: {TRACE_DESCRIPTION}.", ""]
    lines += [
        "## Cases",
        "",
        "Routed requests per replica, hit tokens at first admission, preemptions, evicted",
        "cached blocks, waiting maximum per replica (right after a schedule()), simulated",
        "makespan (s), errors. Blocks are per replica; retention 0, budget 8192 everywhere.",
        "",
        "| case | routing | replicas | layout | blocks | routed | hit | preemptions | evicted "
        "| waiting max | makespan | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [_row(c, summaries.get(c.name)) for c in CASES.values()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def _summary_of(path: Path) -> dict | None:
    if not path.exists():
        return None
    return json.loads(path.read_text().rstrip("\n").rsplit("\n", 1)[-1])


def _parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[Case], str]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", default=[], help="only this case (repeatable)")
    ap.add_argument("--check", action="store_true", help="compare with the files, write nothing")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument(
        "--single-check",
        action="store_true",
        help="replay some concurrent goldens with a fleet of one replica and compare; exit",
    )
    ap.add_argument("--jobs", type=int, default=2, help="oracle runs in parallel (default 2)")
    env = os.environ.get
    ap.add_argument("--oracle-python", default=env("HPA_ORACLE_PYTHON", DEFAULT_ORACLE_PYTHON))
    ap.add_argument("--oracle-script", default=env("HPA_ORACLE_SCRIPT", DEFAULT_ORACLE_SCRIPT))
    args = ap.parse_args(argv)
    args.oracle_python = os.path.expanduser(args.oracle_python)
    unknown = [name for name in args.case if name not in CASES]
    if unknown:
        ap.error(f"unknown case(s): {', '.join(unknown)}")
    script = str((REPO / args.oracle_script).resolve())
    if not args.list and not (Path(args.oracle_python).exists() and Path(script).exists()):
        ap.error(f"oracle not found: {args.oracle_python} {script} (see {GOLDEN_REL}/README.md)")
    return args, [CASES[n] for n in (args.case or CASES)], script


def main(argv: list[str] | None = None) -> int:
    args, selected, script = _parse(argv)
    if args.list:
        for c in CASES.values():
            print(f"{c.name:44s} {c.description}")
        return 0
    if args.single_check:
        problems = single_check(args.oracle_python, script)
        print("\n".join(problems) or "single-check: all equal", file=sys.stderr)
        return 1 if problems else 0
    mismatches: list[str] = []

    def emit(path: Path, text: str) -> None:
        if not args.check:
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            mismatches.append(str(path.relative_to(REPO)))

    GOLDEN.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hpa_fleet_goldens_") as tmp:
        text = trace_text()
        trace_path = Path(tmp) / TRACE_FILE
        trace_path.write_text(text)
        emit(GOLDEN / TRACE_FILE, text)

        def one(case: Case) -> tuple[Case, str, dict]:
            cmd = case.oracle_args(str(trace_path))
            rows, summary, config = _run(cmd, args.oracle_python, script, case.name)
            return case, expected_lines(rows, summary, config), summary

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for case, text, s in pool.map(one, selected):
                emit(GOLDEN / f"{case.name}.expected.jsonl", text)
                print(f"{case.name}: {_brief(s)}", file=sys.stderr, flush=True)
    summaries = {c: _summary_of(GOLDEN / f"{c}.expected.jsonl") for c in CASES}
    emit(GOLDEN / "cases.json", cases_json())
    emit(GOLDEN / "README.md", readme(summaries))
    if mismatches:
        print("differs from the committed goldens:\n  " + "\n  ".join(mismatches), file=sys.stderr)
    return 1 if mismatches else 0


def _brief(s: dict) -> str:
    routed = [r["requests_routed"] for r in s["per_replica"]]
    keys = ("hits", "preemptions", "evicted_blocks", "makespan_s", "errors")
    return f"routed {routed} " + " ".join(f"{k} {s[k]}" for k in keys)


if __name__ == "__main__":
    sys.exit(main())
