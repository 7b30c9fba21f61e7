#!/usr/bin/env python3
"""Fuzz hpa's `sglang` engine against SGLang 0.5.23's own cache code (the oracle in
tools/oracle/sglang/): random small traces and settings, every request compared.

    .venv/bin/python tools/oracle/fuzz_sglang.py --cases 300 --seed 1
    .venv/bin/python tools/oracle/fuzz_sglang.py --family mamba --cases 100

Families: `mamba` (full attention + Mamba, unbounded pools), `mamba-bounded` (small KV and
state pools), `swa` (full attention + sliding window on the unified cache), `swa-bounded`
(small full and SWA KV pools) and `all-bounded` (all three groups, small full, SWA and state
pools). Prints per family the cases run, the cases (and requests) where the two differ,
SGLang's hit tokens and hpa's error on them (net, and the sum of per-request absolute
differences as a share of SGLang's hits), and the first differing cases; `--json PATH` writes
the same counts as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sglang_cases import DEFAULT_PYTHON, compare, hpa_rows, run_oracle  # noqa: E402

FAMILIES = ("mamba", "mamba-bounded", "swa", "swa-bounded", "all-bounded")


def random_trace(rng: np.random.Generator) -> list[dict]:
    """5-30 requests over a few shared trunks: exact repeats, extensions, branches,
    multi-turn continuations (prompt + output + message), with and without outputs."""
    vocab = int(rng.choice([4, 50, 30000]))
    trunks = [rng.integers(0, vocab, int(rng.integers(1, 700))).tolist() for _ in range(3)]
    history: list[list[int]] = []
    out = []
    for i in range(int(rng.integers(5, 31))):
        roll = rng.random()
        if history and roll < 0.15:
            prompt = list(history[int(rng.integers(len(history)))])
        elif history and roll < 0.45:
            base = history[int(rng.integers(len(history)))]
            prompt = base[: int(rng.integers(1, len(base) + 1))] + _tail(rng, vocab, 400)
        else:
            trunk = trunks[int(rng.integers(len(trunks)))]
            prompt = trunk[: int(rng.integers(1, len(trunk) + 1))] + _tail(rng, vocab, 500)
        outputs = _tail(rng, vocab, 400) if rng.random() < 0.6 else []
        history.append(prompt + outputs)
        record = {"request_id": f"q{i:02d}", "prompt_token_ids": prompt}
        if outputs:
            record["output_token_ids"] = outputs
        out.append(record)
    return out


def _tail(rng: np.random.Generator, vocab: int, most: int) -> list[int]:
    return rng.integers(0, vocab, int(rng.integers(0, most + 1))).tolist()


def random_args(rng: np.random.Generator, family: str) -> dict:
    swa = family.startswith("swa")
    both = family.startswith("all")
    strategy = "no_buffer" if swa else str(rng.choice(["no_buffer", "extra_buffer"]))
    # SGLang's no_buffer Mamba cache needs page 1; the SWA cache takes any page
    page = 1 if strategy == "no_buffer" and not swa else int(rng.choice([1, 16, 64]))
    args = {
        "layout": "all" if both else "swa" if swa else "mamba",
        "strategy": strategy,
        "page": page,
        "chunk": int(rng.choice([64, 128, 512, 8192])) // page * page or page,
        "track-interval": int(rng.choice([64, 128, 256])),
    }
    if swa or both:
        args["window"] = int(rng.choice([16, 64, 256]))
    if family.endswith("-bounded"):
        args["kv-tokens"] = int(rng.choice([2048, 4096, 8192])) // page * page
    if family in ("mamba-bounded", "all-bounded"):
        args["num-states"] = int(rng.integers(6, 16))
    if family in ("swa-bounded", "all-bounded"):
        args["swa-tokens"] = int(args["kv-tokens"] * rng.choice([0.5, 0.8])) // page * page
    return args


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100, help="cases per family")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--family", action="append", choices=FAMILIES)
    ap.add_argument("--show", type=int, default=3, help="differing cases printed per family")
    ap.add_argument("--json", help="also write the counts per family to this JSON file")
    ap.add_argument(
        "--answers",
        help="a folder keeping SGLang's answers per family, seed and case count: reused when "
        "there (the oracle runs once for a before/after comparison of hpa)",
    )
    a = ap.parse_args(argv)
    python = os.environ.get("HPA_SGLANG_ORACLE_PYTHON", DEFAULT_PYTHON)
    worst = 0
    report = {}
    for family in a.family or FAMILIES:
        rng = np.random.default_rng([a.seed, FAMILIES.index(family)])
        cases = []
        for k in range(a.cases):
            args = random_args(rng, family)
            cases.append({"name": f"{family}-{k}", "args": args, "requests": random_trace(rng)})
        answers = _answers(
            cases, python, a.answers and Path(a.answers) / f"{family}-{a.seed}-{a.cases}.json"
        )
        refused = differing = requests = differing_requests = hit_requests = 0
        hit_delta = hit_error = sglang_hits = 0
        shown = []
        for case in cases:
            rows = answers[case["name"]]
            if "oracle_error" in rows[0]:
                refused += 1
                continue
            ours = hpa_rows(case["requests"], case["args"])
            diffs = compare(rows, ours)
            theirs = [r for r in rows if "request_id" in r]
            hit_requests += sum(w["hit"] != g["hit"] for w, g in zip(theirs, ours, strict=True))
            hit_delta += sum(g["hit"] - w["hit"] for w, g in zip(theirs, ours, strict=True))
            hit_error += sum(abs(g["hit"] - w["hit"]) for w, g in zip(theirs, ours, strict=True))
            sglang_hits += sum(w["hit"] for w in theirs)
            requests += len(case["requests"])
            differing_requests += len(diffs)
            differing += bool(diffs)
            if diffs and len(shown) < a.show:
                shown.append(f"  {case['name']} {case['args']}: {diffs[0]}")
        ran = len(cases) - refused
        share = hit_error / sglang_hits if sglang_hits else 0.0
        print(
            f"{family}: {ran} cases ({requests} requests) run, {refused} refused by SGLang; "
            f"{differing} cases differ ({differing_requests} requests; {hit_requests} in hit "
            f"tokens, hpa - SGLang = {hit_delta:+,} hit tokens, |error| {hit_error:,} = "
            f"{share:.2%} of SGLang's {sglang_hits:,})"
        )
        report[family] = dict(
            cases=ran,
            refused=refused,
            requests=requests,
            cases_differing=differing,
            requests_differing=differing_requests,
            requests_differing_in_hits=hit_requests,
            sglang_hit_tokens=sglang_hits,
            hit_delta=hit_delta,
            hit_error=hit_error,
        )
        print("\n".join(shown))
        worst = max(worst, differing)
    if a.json:
        Path(a.json).write_text(json.dumps({"seed": a.seed, "families": report}, indent=1) + "\n")
    return 1 if worst else 0


def _answers(cases: list[dict], python: str, path: Path | None) -> dict[str, list[dict]]:
    """SGLang's answers to `cases`, kept at `path` (when given) for the next run."""
    if path is not None and path.exists():
        return json.loads(path.read_text())
    answers = run_oracle(cases, python)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(answers))
    return answers


if __name__ == "__main__":
    sys.exit(main())
