#!/usr/bin/env python3
"""Regenerate the vLLM-oracle CONCURRENT golden files in ``tests/golden/oracle_concurrent/``.

Run with the project's venv from anywhere::

    .venv/bin/python tools/oracle/make_concurrent_goldens.py              # every case
    .venv/bin/python tools/oracle/make_concurrent_goldens.py --case NAME  # one case (repeatable)
    .venv/bin/python tools/oracle/make_concurrent_goldens.py --check      # compare, write nothing
    .venv/bin/python tools/oracle/make_concurrent_goldens.py --list

The sibling of ``make_goldens.py`` (serial mode) for the oracle's ``--concurrent`` mode: every
request of a trace goes through one real vLLM 0.33.0 ``Scheduler`` on a simulated clock, with
arrivals from the trace timestamps (``../shared/oracle/README.md``, "Concurrent mode"). It writes
the traces, ``<case>.expected.jsonl`` (every per-request field the oracle prints, then the
deterministic summary), ``cases.json`` (trace, replay policy with the concurrent keys, exact
oracle command) and ``README.md``. Same environment variables as ``make_goldens.py``
(``HPA_ORACLE_PYTHON``, ``HPA_ORACLE_SCRIPT``); two runs give byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from concurrent_cases import CASES, GOLDEN_REL, MAMBA, SWA, TRACES, Case
from make_goldens import (
    _SCALAR_LIST,
    DEFAULT_ORACLE_PYTHON,
    DEFAULT_ORACLE_SCRIPT,
    FA,
    ORACLE_VERSION,
    REPO,
    _one_line,
    _oracle_env,
)

GOLDEN = REPO / GOLDEN_REL
# Per-request fields of --concurrent, in the oracle's order (error only when present).
REQUEST_FIELDS = (
    "request_id",
    "arrival_s",
    "first_scheduled_s",
    "first_token_s",
    "finished_s",
    "first_step",
    "num_prompt_tokens",
    "num_output_tokens",
    "queried",
    "hit",
    "uncached_common",
    "junction",
    "attn_match",
    "num_preemptions",
    "hit_total",
    "queried_total",
    "chunks",
    "error",
)
# Deterministic summary fields (the wall-clock figures are on the oracle's stderr, never kept).
SUMMARY_FIELDS = (
    "mode",
    "requests",
    "queries",
    "hits",
    "preempted_requests",
    "preempted_queries",
    "preempted_hits",
    "uncached_common",
    "prompt_tokens",
    "steps",
    "empty_steps",
    "scheduled_tokens",
    "preemptions",
    "requests_preempted",
    "errors",
    "evicted_blocks",
    "makespan_s",
    "running_time_mean",
    "in_flight_time_mean",
    "running_max",
    "waiting_max",
    "in_flight_max",
    "kv_usage_max",
    "hit_rate",
    "free_blocks_end",
)
# Compared with a serial-mode run of the same trace for the cases marked serial_check.
SERIAL_FIELDS = ("queried", "hit", "uncached_common", "junction", "attn_match")


# --------------------------------------------------------------------------------------------
# Running the oracle
# --------------------------------------------------------------------------------------------


def _run(cmd: list[str], name: str) -> tuple[list[dict], dict, dict]:
    """(per-request rows, summary, resolved config) of one oracle run."""
    proc = subprocess.run(cmd, cwd=REPO, env=_oracle_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.splitlines()[-20:])
        raise RuntimeError(f"oracle failed for {name} (rc {proc.returncode}):\n{tail}")
    config = {}
    for line in proc.stderr.splitlines():
        if line.startswith('{"config"'):
            config = json.loads(line)["config"]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    if not rows or not rows[-1].get("summary"):
        raise RuntimeError(f"oracle output of {name} has no summary line")
    return rows[:-1], rows[-1], config


def expected_lines(rows: list[dict], summary: dict, config: dict, check: dict) -> str:
    out = []
    for row in rows:
        unknown = set(row) - set(REQUEST_FIELDS)
        if unknown:
            raise RuntimeError(f"unexpected oracle field(s) {sorted(unknown)}")
        out.append(json.dumps(row, separators=(",", ":")))
    tail = {"summary": True, **{key: summary[key] for key in SUMMARY_FIELDS}}
    tail["oracle_config"] = config
    if check:
        tail["serial_check"] = check
    out.append(json.dumps(tail, separators=(",", ":")))
    return "\n".join(out) + "\n"


def serial_check(case: Case, python: str, script: str, trace_path: str, rows: list) -> dict:
    """Replays the trace serially and lists the requests whose SERIAL_FIELDS differ."""
    serial, _, _ = _run([python, script, "--trace", trace_path, *case.cache_args()], case.name)
    differ = [
        c["request_id"]
        for c, s in zip(rows, serial, strict=True)
        if any(c[k] != s[k] for k in SERIAL_FIELDS)
    ]
    return {"fields": list(SERIAL_FIELDS), "requests": len(rows), "differ": differ}


def run_case(case: Case, python: str, script: str, trace_path: str) -> tuple[str, dict]:
    """(expected.jsonl text, summary)."""
    # The async cases run the async oracle (it wraps `script`: HPA_ORACLE_SCRIPT, set in main)
    runner = str(REPO / case.script) if case.async_scheduling else script
    cmd = [python, runner, *case.oracle_args(trace_path)]
    rows, summary, config = _run(cmd, case.name)
    check = serial_check(case, python, script, trace_path, rows) if case.serial_check else {}
    return expected_lines(rows, summary, config, check), summary


# --------------------------------------------------------------------------------------------
# cases.json and README.md
# --------------------------------------------------------------------------------------------

NOTES = {
    "paths": "trace and expected are file names inside tests/golden/oracle_concurrent/; "
    "oracle_command and oracle_args run from the repository root (python = "
    "$HPA_ORACLE_PYTHON, default shown). Every flag is spelled out, defaults included.",
    "expected": "one JSON line per request in trace order with every field the oracle's "
    "--concurrent mode prints (simulated seconds arrival_s, first_scheduled_s, first_token_s, "
    "finished_s; first_step; num_prompt_tokens, num_output_tokens; queried, hit, "
    "uncached_common, junction, attn_match at the first admission; num_preemptions; "
    "hit_total, queried_total over every admission; chunks = tokens scheduled per step, "
    "decode steps 1; error if never admitted), then a summary line (deterministic fields "
    "only, oracle_config, and serial_check where the case has one). No wall-clock timings.",
    "policy": "the replay policy plus the concurrent keys: schedule = concurrent, "
    "max_num_seqs, step_base_ms, step_token_us, time_scale (a step lasts step_base_ms/1000 + "
    "step_token_us/1e6 x scheduled tokens; arrival = (timestamp - first) x time_scale). "
    "max_num_batched_tokens defaults to 8192 under --concurrent and num_blocks to 100000; "
    "both are written explicitly.",
    "num_blocks": "the size of ONE BlockPool shared by all groups; block 0 is the null block "
    "(see tests/golden/oracle/cases.json notes.num_blocks).",
    "groups": "[full_attention] = --mamba-mode off; mamba = --mamba-mode align; "
    "sliding_window = --sliding-window W. spec_decode eagle_lookahead = --eagle.",
    "serial_check": "for time_scale 1000 the same trace was also replayed in serial mode with "
    "the same cache flags; differ lists the requests whose queried/hit/uncached_common/"
    "junction/attn_match differ (empty: the concurrent replay equals serial).",
    "chunks": "kept for every case (each expected file is under 100 KB).",
}


def cases_json() -> str:
    doc = {
        "about": "Golden per-request results of vLLM 0.33.0's real Scheduler + KVCacheManager "
        "in the oracle's --concurrent mode (../shared/oracle/vllm_oracle.py, one scheduler on "
        "a simulated clock). Regenerate with `python tools/oracle/make_concurrent_goldens.py`.",
        "oracle": ORACLE_VERSION,
        "notes": NOTES,
        "cases": {
            c.name: {
                "description": c.description,
                "trace": TRACES[c.trace].file,
                "expected": f"{c.name}.expected.jsonl",
                "policy": c.policy(),
                "oracle_args": c.oracle_args(),
                "oracle_command": c.command(),
            }
            for c in CASES.values()
        },
    }
    return _SCALAR_LIST.sub(_one_line, json.dumps(doc, indent=2)) + "\n"


def _fmt_policy(c: Case) -> str:
    names = {FA: "FA", SWA: f"SWA{c.sliding_window}", MAMBA: "M"}
    parts = ["+".join(names[g] for g in c.groups), f"B={c.block_size}"]
    if c.prefix_match_unit:
        parts.append(f"unit={c.prefix_match_unit}")
    if MAMBA in c.groups:
        parts.append(f"ret={'null' if c.retention_interval is None else c.retention_interval}")
    if c.max_num_batched_tokens != 8192:
        parts.append(f"budget={c.max_num_batched_tokens}")
    if c.num_blocks != 100_000:
        parts.append(f"blocks={c.num_blocks}")
    if c.spec_decode != "none":
        parts.append(c.spec_decode)
    if c.time_scale != 1.0:
        parts.append(f"time_scale={c.time_scale:g}")
    if c.async_scheduling:
        parts.append("async")
    return " ".join(parts)


README_HEAD = """\
# vLLM oracle goldens, concurrent scheduler

Golden per-request prefix-cache results of **vLLM 0.33.0's own** v1 `Scheduler` and KV-cache
manager in the oracle's `--concurrent` mode (`../shared/oracle/vllm_oracle.py`, README section
"Concurrent mode"): all requests of a trace share one scheduler on a simulated clock, arrivals
from the trace timestamps, a step lasting 5 ms + 100 us per scheduled token (defaults), so
requests overlap, batch, evict and get preempted. Generated by
`tools/oracle/make_concurrent_goldens.py` (traces and cases in `tools/oracle/concurrent_cases.py`);
do not edit by hand. The serial goldens are in `../oracle/`.

Files: `*.trace.jsonl` (oracle input: `request_id`, `prompt_token_ids`, `output_token_ids`,
`timestamp`), `<case>.expected.jsonl` (every per-request field of the oracle in its order, then
a summary line with the deterministic totals, `oracle_config` and, for `*_ts1000`,
`serial_check`), `cases.json` (per case: trace, replay policy with `schedule: "concurrent"`,
`max_num_seqs`, `step_base_ms`, `step_token_us`, `time_scale`, and the exact oracle command).

## Regenerate

```bash
.venv/bin/python tools/oracle/make_concurrent_goldens.py              # all cases, 2 at a time
.venv/bin/python tools/oracle/make_concurrent_goldens.py --case NAME  # one case (repeatable)
.venv/bin/python tools/oracle/make_concurrent_goldens.py --check      # verify, write nothing
.venv/bin/python tools/oracle/make_concurrent_goldens.py --list
```

The oracle venv and the environment variables are those of `../oracle/README.md`. Each oracle
run costs 10-20 s of vLLM/torch start-up; all cases take a few minutes on 2 shared cores.
"""


def _row(c: Case, s: dict | None) -> str:
    if s is None:
        return f"| `{c.name}` | `{c.trace}` | {_fmt_policy(c)} " + "| ? " * 9 + "|"
    return (
        f"| `{c.name}` | `{c.trace}` | {_fmt_policy(c)} | {s['requests']} | {s['hits']:,} | "
        f"{s['uncached_common']:,} | {s['preemptions']} | {s['evicted_blocks']:,} | "
        f"{s['makespan_s']} | {s['in_flight_max']} | {s['in_flight_time_mean']} | "
        f"{s['errors']} |"
    )


def readme(summaries: dict[str, dict | None]) -> str:
    lines = [README_HEAD, "## Traces", "", "| trace | what |", "| --- | --- |"]
    lines += [f"| `{t.file}` | {t.description} |" for t in TRACES.values()]
    lines += [
        "",
        "## Cases",
        "",
        "Totals: hit and uncached (sparse-retention miss) tokens at first admission,",
        "preemptions, evicted cached blocks, simulated makespan (s), requests in flight (max",
        "and time mean), errors. Policy: groups (M = Mamba align), B, then what differs from",
        "the defaults (retention 0, budget 8192, 100,000 blocks, time scale 1).",
        "",
        "| case | trace | policy | requests | hit | uncached | preemptions | evicted | "
        "makespan | in flight max | in flight mean | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [_row(c, summaries.get(c.name)) for c in CASES.values()]
    for c in CASES.values():
        check = (summaries.get(c.name) or {}).get("serial_check")
        if check:
            n, differ = check["requests"], check["differ"]
            lines += ["", f"`{c.name}` against a serial-mode replay of the same trace and cache"]
            lines += [f"flags ({', '.join(check['fields'])}): {n - len(differ)} of {n} requests"]
            lines[-1] += " equal." if not differ else f" equal; differ: {', '.join(differ)}."
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
    os.environ["HPA_ORACLE_SCRIPT"] = script  # the oracle the async one wraps
    if args.list:
        for c in CASES.values():
            print(f"{c.name:36s} {c.trace:16s} {_fmt_policy(c)}")
        return 0
    mismatches: list[str] = []

    def emit(path: Path, text: str) -> None:
        if not args.check:
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            mismatches.append(str(path.relative_to(REPO)))

    GOLDEN.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hpa_conc_goldens_") as tmp:
        traces = {}
        for name in dict.fromkeys(c.trace for c in selected):
            text = TRACES[name].build(Path(script).parent / "traces")
            traces[name] = Path(tmp) / TRACES[name].file
            traces[name].write_text(text)
            emit(GOLDEN / TRACES[name].file, text)

        def one(case: Case) -> tuple[Case, str, dict]:
            text, summary = run_case(case, args.oracle_python, script, str(traces[case.trace]))
            return case, text, summary

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
    keys = ("requests", "hits", "preemptions", "in_flight_max", "makespan_s", "errors")
    return " ".join(f"{k} {s[k]}" for k in keys)


if __name__ == "__main__":
    sys.exit(main())
