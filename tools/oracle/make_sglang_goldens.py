#!/usr/bin/env python3
"""Regenerate the SGLang-oracle golden files in ``tests/golden/oracle_sglang/``.

    .venv/bin/python tools/oracle/make_sglang_goldens.py           # every case
    .venv/bin/python tools/oracle/make_sglang_goldens.py --check   # compare, write nothing
    .venv/bin/python tools/oracle/make_sglang_goldens.py --list

Each case's trace goes through SGLang 0.5.23's own cache code (tools/oracle/sglang/oracle.py,
run with the oracle's venv, ``HPA_SGLANG_ORACLE_PYTHON``, default
``~/.cache/hpa-oracle-sglang/bin/python``; not a project dependency); its per-request lines
are stored as ``<case>.expected.jsonl``, the traces as ``<trace>.trace.jsonl`` and the table
of cases (trace, oracle flags, the hpa policy they mean) as ``cases.json``. Seeded: two runs
write the same bytes. ``tests/sim/sglang/test_oracle_golden.py`` replays every case through
hpa and compares request by request.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_goldens import chat_records, tree_records  # noqa: E402
from sglang_cases import DEFAULT_PYTHON, REPO, compare, hpa_rows, policy_of, run_oracle  # noqa: E402

GOLDEN = REPO / "tests" / "golden" / "oracle_sglang"
KEYS = ("request_id", "prompt_token_ids", "output_token_ids")


def seed_records() -> list[dict]:
    """The seed article's case: three 2,176-token prompts sharing their first 1,088."""
    base = list(range(1, 1089))
    return [
        {
            "request_id": f"r{i}",
            "prompt_token_ids": base + [100000 * (i + 1) + j for j in range(1088)],
        }
        for i in range(3)
    ]


TRACES = {
    "seed": seed_records,
    "tree200": lambda: list(tree_records(seed=11, unit=256, num_requests=200)),
    "chat200": lambda: list(chat_records(seed=12, unit=256, num_requests=200)),
    "chat300": lambda: list(chat_records(seed=13, unit=512, num_requests=300)),
}

# name: (trace, oracle flags); what each checks is in its name
CASES = {
    "seed_nobuf_p1": ("seed", {"strategy": "no_buffer"}),
    "seed_extra_p1": ("seed", {"strategy": "extra_buffer"}),
    "seed_extra_p64": ("seed", {"strategy": "extra_buffer", "page": 64}),
    "tree_nobuf_p1_c512": ("tree200", {"strategy": "no_buffer", "chunk": 512}),
    "tree_extra_p64_c512": ("tree200", {"strategy": "extra_buffer", "page": 64, "chunk": 512}),
    "tree_extra_p1_c8192": ("tree200", {"strategy": "extra_buffer"}),
    "chat_nobuf_p1": ("chat200", {"strategy": "no_buffer"}),
    "chat_extra_p64": ("chat200", {"strategy": "extra_buffer", "page": 64}),
    "chat_extra_p1_track128": ("chat200", {"strategy": "extra_buffer", "track-interval": 128}),
    "chat_nobuf_p1_kv6000": ("chat200", {"strategy": "no_buffer", "kv-tokens": 6000}),
    "chat_extra_p64_kv6144_states8": (
        "chat200",
        {"strategy": "extra_buffer", "page": 64, "kv-tokens": 6144, "num-states": 8},
    ),
    "chat_nobuf_p1_states6": ("chat200", {"strategy": "no_buffer", "num-states": 6}),
    "chat300_extra_p64_c512": ("chat300", {"strategy": "extra_buffer", "page": 64, "chunk": 512}),
    "tree_swa_p1_w256": ("tree200", {"layout": "swa", "window": 256}),
    "tree_swa_p64_w512_c512": (
        "tree200",
        {"layout": "swa", "page": 64, "window": 512, "chunk": 512},
    ),
    "chat_swa_p1_w128_kv8000": ("chat200", {"layout": "swa", "window": 128, "kv-tokens": 8000}),
    "chat_all_extra_p64_w256": (
        "chat200",
        {"layout": "all", "strategy": "extra_buffer", "page": 64},
    ),
    # issue 46: tree/chat300 bounded at page 64, the paged allocator's eviction rule (an
    # extend evicts for one page more, a decode step for a page); chat_swa bounded, the new
    # SWA leaf split at one window, the SWA refresh order, tombstone leaves kept, SWA decode
    # frees before a step allocates; chat_all, the unified cache's window rules (unbounded
    # no_buffer at page 1, and bounded with extra_buffer: its retain floor behind the last
    # state)
    "tree_extra_p64_c512_kv3072": (
        "tree200",
        {"strategy": "extra_buffer", "page": 64, "chunk": 512, "kv-tokens": 3072},
    ),
    "chat300_extra_p64_c512_kv6144": (
        "chat300",
        {"strategy": "extra_buffer", "page": 64, "chunk": 512, "kv-tokens": 6144},
    ),
    "chat_swa_p16_w64_kv6144_swa3072": (
        "chat200",
        {"layout": "swa", "page": 16, "window": 64, "kv-tokens": 6144, "swa-tokens": 3072},
    ),
    "chat_swa_p1_w256_kv8000_swa4000": (
        "chat200",
        {"layout": "swa", "window": 256, "kv-tokens": 8000, "swa-tokens": 4000},
    ),
    "chat_all_nobuf_p1_w128": ("chat200", {"layout": "all", "window": 128}),
    "chat_all_extra_p16_w128_kv6144_states10_swa4096": (
        "chat200",
        {
            "layout": "all",
            "strategy": "extra_buffer",
            "page": 16,
            "window": 128,
            "kv-tokens": 6144,
            "num-states": 10,
            "swa-tokens": 4096,
        },
    ),
}


def _trace(name: str) -> list[dict]:
    return [{k: _plain(r[k]) for k in KEYS if k in r} for r in TRACES[name]()]


def _plain(value):
    return value.tolist() if hasattr(value, "tolist") else value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with hpa, write nothing")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--case", action="append", help="only this case (repeatable)")
    a = ap.parse_args(argv)
    names = a.case or list(CASES)
    if a.list:
        print("\n".join(f"{n}: {CASES[n][0]} {CASES[n][1]}" for n in names))
        return 0
    traces = {t: _trace(t) for t in {CASES[n][0] for n in names}}
    cases = [{"name": n, "args": CASES[n][1], "requests": traces[CASES[n][0]]} for n in names]
    python = os.environ.get("HPA_SGLANG_ORACLE_PYTHON", DEFAULT_PYTHON)
    answers = run_oracle(cases, python)
    bad = 0
    for case in cases:
        rows = answers[case["name"]]
        diffs = compare(rows, hpa_rows(case["requests"], case["args"]))
        summary = rows[-1]
        print(
            f"{case['name']}: {summary['requests']} requests, {summary['hits']:,} hit tokens, "
            f"evicted {summary['evicted_kv_tokens']:,} KV / {summary['evicted_states']} states"
            f" / {summary['evicted_swa_tokens']:,} SWA; "
            + (f"{len(diffs)} requests differ from hpa" if diffs else "hpa agrees")
        )
        for line in diffs[:5]:
            print("   ", line)
        bad += bool(diffs)
    if not a.check:
        _write(cases, answers, traces)
    return 0


def _write(cases: list[dict], answers: dict, traces: dict) -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, records in traces.items():
        text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        (GOLDEN / f"{name}.trace.jsonl").write_text(text)
    table = {}
    for case in cases:
        name = case["name"]
        rows = answers[name]
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
        (GOLDEN / f"{name}.expected.jsonl").write_text(text)
        table[name] = {
            "trace": f"{CASES[name][0]}.trace.jsonl",
            "oracle_args": case["args"],
            "policy": policy_of(case["args"]),
        }
    path = GOLDEN / "cases.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    old.update(table)
    path.write_text(json.dumps(dict(sorted(old.items())), indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
