#!/usr/bin/env python3
"""Regenerate the vLLM-oracle golden files in ``tests/golden/oracle/``.

Run with the project's venv from anywhere::

    .venv/bin/python tools/oracle/make_goldens.py              # every case
    .venv/bin/python tools/oracle/make_goldens.py --case NAME  # one case (repeatable)
    .venv/bin/python tools/oracle/make_goldens.py --check      # compare, write nothing
    .venv/bin/python tools/oracle/make_goldens.py --list

For each case it writes the (small, deterministic) trace in the oracle's input format, replays it
through vLLM 0.33.0's real scheduler and KV-cache manager (``../shared/oracle/vllm_oracle.py``,
run as a subprocess with the oracle's own venv, which is NOT a project dependency) and stores the
per-request results as ``<case>.expected.jsonl``. ``cases.json`` maps each case to its trace, its
replay policy (docs/definitions.md#replay-policies) and the exact oracle command; ``README.md``
is rewritten with the totals.

Environment: ``HPA_ORACLE_PYTHON`` (default ``~/.cache/hpa-oracle/bin/python``) and
``HPA_ORACLE_SCRIPT`` (default ``../shared/oracle/vllm_oracle.py``, relative to the repo root).
Everything is seeded: two runs give byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from analyzer.traces.synth import generate, write_jsonl

REPO = Path(__file__).resolve().parents[2]
GOLDEN_REL = "tests/golden/oracle"
GOLDEN = REPO / GOLDEN_REL
# As the commands in cases.json show it (a shell expands `~`); `oracle_python` expands it here.
DEFAULT_ORACLE_PYTHON = "~/.cache/hpa-oracle/bin/python"
DEFAULT_ORACLE_SCRIPT = "../shared/oracle/vllm_oracle.py"


def oracle_command(script: str, args: list[str]) -> str:
    """The oracle command a golden file records: the default Python (`~` left for the shell
    to expand), then the script and its flags quoted."""
    return f"{DEFAULT_ORACLE_PYTHON} {shlex.join([script, *args])}"


ORACLE_VERSION = "vllm 0.33.0"
# Per-request fields copied from the oracle output, in this order (plus per_group/error if present).
REQUEST_FIELDS = ("request_id", "queried", "hit", "uncached_common", "junction", "attn_match")
# Deterministic summary fields (timings are left out on purpose).
SUMMARY_FIELDS = (
    "requests",
    "queries",
    "hits",
    "uncached_common",
    "prompt_tokens",
    "steps",
    "errors",
    "preempted_requests",
    "hit_rate",
    "free_blocks_end",
)
ORACLE_RECORD_KEYS = ("request_id", "prompt_token_ids", "output_token_ids")


# --------------------------------------------------------------------------------------------
# Traces
# --------------------------------------------------------------------------------------------


def _oracle_records(records: Iterable[dict]) -> Iterator[dict]:
    """Only the fields the oracle reads (canonical extras such as cache_salt are dropped)."""
    for record in records:
        yield {key: record[key] for key in ORACLE_RECORD_KEYS if key in record}


def _synth(scenario: str, seed: int = 0, **params) -> Callable[[], Iterator[dict]]:
    return lambda: _oracle_records(generate(scenario, seed=seed, arrays=True, **params))


class _Tokens:
    """Seeded token source. A tiny vocabulary keeps the golden files small (2 bytes per token);
    ids that agree by chance only move a junction by a token or two, and the oracle's answer is
    the ground truth for whatever the trace holds."""

    def __init__(self, seed: int, unit: int, vocab: int = 10) -> None:
        self.rng = np.random.default_rng(seed)
        self.unit = unit
        self.vocab = vocab

    def tokens(self, n: int) -> np.ndarray:
        return self.rng.integers(0, self.vocab, size=max(0, n), dtype=np.int32)

    def span(self, lo: float, hi: float) -> int:
        """A length drawn uniformly from [lo * unit, hi * unit] (at least 1 token)."""
        return max(1, int(self.rng.integers(round(lo * self.unit), round(hi * self.unit) + 1)))

    def pick(self, weights: Iterable[float]) -> int:
        w = np.asarray(list(weights), dtype=np.float64)
        return int(self.rng.choice(len(w), p=w / w.sum()))


def tree_records(seed: int, unit: int, num_requests: int) -> Iterator[dict]:
    """A heavy-sharing single-turn trace shaped like a prefix tree (lengths scale with `unit`).

    Five system prompts (four share a preamble of 1.1-1.5 units; one of those ends exactly at
    2 units, one branches off inside another's own part; one is unrelated), a pool of documents,
    and requests of these kinds: chat (system + message), rag (system + 1-2 documents + question),
    exact repeat of an earlier prompt, extension of an earlier prompt (a turn without outputs),
    truncation of an earlier prompt (often at a unit boundary, or one token either side of it),
    unique prompts, and a bare system prompt.
    """
    t = _Tokens(seed, unit)
    preamble = t.tokens(t.span(1.1, 1.5))
    s1 = np.concatenate([preamble, t.tokens(t.span(0.9, 1.4))])
    systems = [
        np.concatenate([preamble, t.tokens(t.span(0.2, 0.6))]),
        s1,
        np.concatenate([preamble, t.tokens(2 * unit - len(preamble))]),
        t.tokens(t.span(1.0, 1.8)),
        np.concatenate([s1[: len(preamble) + t.span(0.3, 0.6)], t.tokens(t.span(0.4, 0.9))]),
    ]
    system_weights = (0.35, 0.2, 0.15, 0.15, 0.15)
    docs = [t.tokens(t.span(0.3, 1.2)) for _ in range(8)]
    doc_weights = 1.0 / np.arange(1, len(docs) + 1)
    kinds = ("chat", "rag", "repeat", "extend", "prefix", "unique", "system")
    kind_weights = (0.33, 0.2, 0.1, 0.15, 0.08, 0.07, 0.07)
    history: list[np.ndarray] = []
    for i in range(num_requests):
        kind = kinds[t.pick(kind_weights)]
        if kind in ("repeat", "extend", "prefix") and not history:
            kind = "chat"
        if kind == "chat":
            prompt = np.concatenate([systems[t.pick(system_weights)], t.tokens(t.span(0.02, 0.5))])
        elif kind == "rag":
            count = 1 + int(t.rng.integers(2))
            picks = t.rng.choice(len(docs), count, replace=False, p=doc_weights / doc_weights.sum())
            parts = [systems[t.pick((0.6, 0, 0, 0.4, 0))]] + [docs[k] for k in picks.tolist()]
            prompt = np.concatenate([*parts, t.tokens(t.span(0.02, 0.2))])
        elif kind == "repeat":
            prompt = history[int(t.rng.integers(len(history)))].copy()
        elif kind == "extend":
            base = history[int(t.rng.integers(len(history)))]
            if len(base) > 3.5 * unit:
                base = systems[t.pick(system_weights)]
            prompt = np.concatenate([base, t.tokens(t.span(0.05, 0.6))])
        elif kind == "prefix":
            base = history[int(t.rng.integers(len(history)))]
            k = max(1, len(base) // unit)
            cut = (k * unit, k * unit + 1, k * unit - 1, int(t.rng.integers(1, len(base) + 1)))
            prompt = base[: max(1, min(len(base), cut[int(t.rng.integers(len(cut)))]))].copy()
        elif kind == "unique":
            prompt = t.tokens(t.span(0.2, 2.0))
        else:
            prompt = systems[t.pick(system_weights)].copy()
        history.append(prompt)
        yield {"request_id": f"t{i:03d}-{kind}", "prompt_token_ids": prompt}


def chat_records(seed: int, unit: int, num_requests: int) -> Iterator[dict]:
    """Multi-turn conversations with output_token_ids: turn k's prompt = turn k-1's prompt +
    its output + a new message. Three system prompts (two share a preamble); conversations last
    2-6 turns; 10% of the steps re-send a conversation's last prompt (a "regenerate") with a
    different output, which forks the conversation."""
    t = _Tokens(seed, unit)
    preamble = t.tokens(t.span(0.6, 0.9))
    systems = [
        np.concatenate([preamble, t.tokens(t.span(0.3, 0.8))]),
        np.concatenate([preamble, t.tokens(t.span(0.1, 0.4))]),
        t.tokens(t.span(0.8, 1.3)),
    ]
    # Open conversations: [conversation id, context, last prompt, turns left].
    open_convs: list[list] = []
    next_conv = 0
    for i in range(num_requests):
        roll = t.rng.random()
        if open_convs and roll < 0.1:
            conv = open_convs[int(t.rng.integers(len(open_convs)))]
            prompt, kind = conv[2], "regen"
        elif open_convs and (roll < 0.75 or len(open_convs) >= 6):
            conv = open_convs[int(t.rng.integers(len(open_convs)))]
            prompt, kind = np.concatenate([conv[1], t.tokens(t.span(0.1, 0.8))]), "turn"
        else:
            system = systems[t.pick((0.5, 0.3, 0.2))]
            conv = [next_conv, system, None, 2 + int(t.rng.integers(5))]
            next_conv += 1
            open_convs.append(conv)
            prompt, kind = np.concatenate([system, t.tokens(t.span(0.1, 0.8))]), "new"
        output = t.tokens(t.span(0.05, 1.0))
        conv[1] = np.concatenate([prompt, output])
        conv[2] = prompt
        conv[3] -= 1
        if conv[3] <= 0 or len(conv[1]) > 6 * unit:
            open_convs.remove(conv)
        yield {
            "request_id": f"c{conv[0]:02d}-{i:03d}-{kind}",
            "prompt_token_ids": prompt,
            "output_token_ids": output,
        }


@dataclass(frozen=True)
class Trace:
    name: str
    description: str
    build: Callable[[], Iterable[dict]]

    @property
    def file(self) -> str:
        return f"{self.name}.trace.jsonl"


def _diag(shared: int) -> Trace:
    return Trace(
        f"diag_3x2176_shared{shared}",
        f"synth diagnostic: 3 prompts of 2,176 tokens sharing the first {shared:,} (seed 0)",
        _synth("diagnostic", prompt_tokens=2176, shared_tokens=shared, num_requests=3),
    )


def _groups(shared: int) -> Trace:
    return Trace(
        f"groups_8x4_2200_shared{shared}",
        f"synth groups: 8 groups of 4 prompts of 2,200 tokens, each group sharing {shared:,}"
        " (seed 0)",
        _synth("groups", num_groups=8, group_size=4, prompt_tokens=2200, shared_tokens=shared),
    )


TRACES: dict[str, Trace] = {
    t.name: t
    for t in [
        *(_diag(s) for s in (543, 545, 1087, 1088, 1089, 1632)),
        _groups(1600),
        _groups(1500),
        Trace(
            "tree544",
            "100 heavy-sharing single-turn requests (tree_records, seed 544, unit 544, vocab 10)",
            lambda: tree_records(seed=544, unit=544, num_requests=100),
        ),
        Trace(
            "tree64",
            "100 heavy-sharing single-turn requests (tree_records, seed 64, unit 128, vocab 10)",
            lambda: tree_records(seed=64, unit=128, num_requests=100),
        ),
        Trace(
            "chat64",
            "100 multi-turn requests with output_token_ids (chat_records, seed 7, unit 128, "
            "vocab 10)",
            lambda: chat_records(seed=7, unit=128, num_requests=100),
        ),
        Trace(
            "mixed40",
            "synth mixed: 40 requests (chat, multi-turn with output_token_ids, rag, agent), "
            "seed 0, salt_fraction 0",
            _synth("mixed", num_requests=40, salt_fraction=0.0),
        ),
    ]
}


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------

FA, SWA, MAMBA = "full_attention", "sliding_window", "mamba"


@dataclass(frozen=True)
class Case:
    name: str
    trace: str
    description: str
    block_size: int
    groups: tuple[str, ...] = (FA, MAMBA)
    retention_interval: int | None = 0
    prefix_match_unit: int | None = None
    sliding_window: int | None = None
    max_num_batched_tokens: int | None = None
    num_blocks: int | None = None
    spec_decode: str = "none"
    spec6: dict | None = field(default=None)  # what docs/definitions.md#worked-examples states

    def policy(self) -> dict:
        return {
            "engine": "vllm",
            "groups": list(self.groups),
            "block_size": self.block_size,
            "prefix_match_unit": self.prefix_match_unit,
            "retention_interval": self.retention_interval,
            "sliding_window": self.sliding_window,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "num_blocks": self.num_blocks,
            "spec_decode": self.spec_decode,
        }

    def oracle_args(self, trace_path: str | None = None) -> list[str]:
        path = trace_path or f"{GOLDEN_REL}/{TRACES[self.trace].file}"
        retention = "None" if self.retention_interval is None else str(self.retention_interval)
        args = ["--trace", path, "--block-size", str(self.block_size)]
        args += ["--mamba-mode", "align" if MAMBA in self.groups else "off"]
        args += ["--retention-interval", retention]
        if self.prefix_match_unit is not None:
            args += ["--prefix-match-unit", str(self.prefix_match_unit)]
        if SWA in self.groups:
            args += ["--sliding-window", str(self.sliding_window)]
        if self.max_num_batched_tokens is not None:
            args += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        if self.num_blocks is not None:
            args += ["--num-gpu-blocks", str(self.num_blocks)]
        if self.spec_decode == "eagle_lookahead":
            args += ["--eagle"]
        elif self.spec_decode == "eagle_drop":
            args += ["--eagle", "--eagle-legacy-drop"]
        return args + ["--per-group"]

    def command(self) -> str:
        return oracle_command(DEFAULT_ORACLE_SCRIPT, self.oracle_args())

    def __post_init__(self) -> None:
        assert self.trace in TRACES, self.trace
        assert (SWA in self.groups) == (self.sliding_window is not None), self.name
        assert self.spec_decode in ("none", "eagle_lookahead", "eagle_drop"), self.name


def _spec6_diag() -> list[Case]:
    hu = {
        543: [(0, 0), (0, 0), (0, 0)],
        545: [(0, 0), (0, 544), (544, 0)],
        1087: [(0, 0), (0, 544), (544, 0)],
        1088: [(0, 0), (0, 1088), (1088, 0)],
        1089: [(0, 0), (0, 1088), (1088, 0)],
        1632: [(0, 0), (1632, 0), (1632, 0)],
    }
    cases = [
        Case(
            f"spec6_diag_shared{shared}_b544_ret0",
            f"diag_3x2176_shared{shared}",
            f"worked example: 3 x 2,176 tokens sharing {shared:,}, B=544, FA+Mamba, retention 0",
            544,
            spec6={"hit_uncached": expected},
        )
        for shared, expected in hu.items()
    ]
    budget = [
        (None, "null", [(0, 0), (1088, 0), (1088, 0)]),
        (0, "0", [(0, 0), (0, 1088), (1088, 0)]),
        (1088, "1088", [(0, 0), (1088, 0), (1088, 0)]),
    ]
    for retention, label, expected in budget:
        cases.append(
            Case(
                f"spec6_diag_shared1088_b544_budget544_ret{label}",
                "diag_3x2176_shared1088",
                f"worked example / oracle README: shared 1,088, budget 544, retention {label}",
                544,
                retention_interval=retention,
                max_num_batched_tokens=544,
                spec6={"hit_uncached": expected},
            )
        )
    for shared in (545, 1087):
        cases.append(
            Case(
                f"spec6_diag_shared{shared}_b544_budget544_ret1088",
                f"diag_3x2176_shared{shared}",
                f"oracle README: shared {shared:,}, budget 544, retention 1088",
                544,
                retention_interval=1088,
                max_num_batched_tokens=544,
                spec6={"hit_uncached": [(0, 0), (0, 544), (544, 0)]},
            )
        )
    return cases


def _spec6_groups() -> list[Case]:
    def grp(name, shared, retention, budget, hits, lost):
        return Case(
            name,
            f"groups_8x4_2200_shared{shared}",
            f"worked example: 8 groups of 4 x 2,200 tokens sharing {shared:,}, B=528, retention "
            f"{'null' if retention is None else retention}, budget {budget or 'none'}",
            528,
            retention_interval=retention,
            max_num_batched_tokens=budget,
            spec6=None if hits is None else {"queried": 70400, "hit": hits, "uncached": lost},
        )

    return [
        grp("spec6_groups_shared1600_b528_retnull_budget2048", 1600, None, 2048, 38016, 0),
        grp("spec6_groups_shared1600_b528_ret0_budget2048", 1600, 0, 2048, 25344, 12672),
        grp("spec6_groups_shared1600_b528_retnull_budget8192", 1600, None, 8192, 25344, 12672),
        # Not a worked example: the 2,048 budget of the rows above dropped (the default).
        grp("spec6_groups_shared1600_b528_ret0", 1600, 0, None, None, None),
        # The 1,500 example states no retention or budget: read with the policy defaults
        # (retention 0, no budget) and with the 2,048 budget of the rows above; both agree.
        grp("spec6_groups_shared1500_b528_ret0", 1500, 0, None, 16896, 8448),
        grp("spec6_groups_shared1500_b528_ret0_budget2048", 1500, 0, 2048, 16896, 8448),
        grp("spec6_groups_shared1500_b528_retnull_budget2048", 1500, None, 2048, None, None),
    ]


def _coverage(
    trace: str,
    b: int,
    *,
    budget_odd: int,
    window: int,
    unit: int,
    blocks: tuple[int, int],
    combined_blocks: int,
) -> list[Case]:
    """One case per policy key on `trace` with block size `b` (FA+Mamba, retention 0 unless
    the key under test says otherwise)."""
    p = f"{trace}_b{b}"
    roomy, tight = blocks
    return [  # fmt: skip
        Case(f"{p}_ret0", trace, "retention 0 (semantic checkpoints only)", b),
        Case(f"{p}_retnull", trace, "retention null (every state)", b, retention_interval=None),
        Case(f"{p}_ret{2 * b}", trace, f"retention {2 * b} (2B)", b, retention_interval=2 * b),
        # Budget B: a chunk end (so a produced Mamba state) at every block boundary, which is
        # where retention 0 / N / null differ most.
        Case(
            f"{p}_budget{b}_ret0", trace, f"budget {b} (1 block/step)", b, max_num_batched_tokens=b
        ),
        Case(
            f"{p}_budget{b}_retnull",
            trace,
            f"budget {b}, retention null",
            b,
            retention_interval=None,
            max_num_batched_tokens=b,
        ),
        Case(
            f"{p}_budget{b}_ret{2 * b}",
            trace,
            f"budget {b}, retention {2 * b}",
            b,
            retention_interval=2 * b,
            max_num_batched_tokens=b,
        ),
        Case(
            f"{p}_budget{2 * b}_ret0",
            trace,
            f"chunked prefill, budget {2 * b} (2B)",
            b,
            max_num_batched_tokens=2 * b,
        ),
        Case(
            f"{p}_budget{2 * b}_retnull",
            trace,
            f"chunked prefill, budget {2 * b}, retention null",
            b,
            retention_interval=None,
            max_num_batched_tokens=2 * b,
        ),
        Case(
            f"{p}_budget{budget_odd}_ret0",
            trace,
            f"chunked prefill, budget {budget_odd} (not a multiple of B)",
            b,
            max_num_batched_tokens=budget_odd,
        ),
        Case(
            f"{p}_budget{budget_odd}_retnull",
            trace,
            f"chunked prefill, budget {budget_odd}, retention null",
            b,
            retention_interval=None,
            max_num_batched_tokens=budget_odd,
        ),
        Case(
            f"{p}_unit{unit}",
            trace,
            f"prefix_match_unit {unit} (< block)",
            b,
            prefix_match_unit=unit,
        ),
        Case(
            f"{p}_unit{unit}_retnull",
            trace,
            f"prefix_match_unit {unit}, retention null",
            b,
            retention_interval=None,
            prefix_match_unit=unit,
        ),
        Case(
            f"{p}_swa{window}",
            trace,
            f"FA + SWA(W={window}) + Mamba",
            b,
            groups=(FA, SWA, MAMBA),
            sliding_window=window,
        ),
        Case(
            f"{p}_fa_swa{window}",
            trace,
            f"FA + SWA(W={window}), no Mamba",
            b,
            groups=(FA, SWA),
            sliding_window=window,
        ),
        Case(f"{p}_fa_only", trace, "FA only (--mamba-mode off)", b, groups=(FA,)),
        Case(
            f"{p}_blocks{roomy}", trace, f"pool of {roomy} blocks (eviction)", b, num_blocks=roomy
        ),
        Case(
            f"{p}_blocks{tight}",
            trace,
            f"pool of {tight} blocks (tight: heavy eviction, every request still schedulable)",
            b,
            num_blocks=tight,
        ),
        Case(
            f"{p}_blocks{roomy}_retnull",
            trace,
            f"pool of {roomy} blocks, retention null",
            b,
            retention_interval=None,
            num_blocks=roomy,
        ),
        Case(
            f"{p}_eagle_lookahead",
            trace,
            "EAGLE, vLLM 0.33 lookahead hashes",
            b,
            spec_decode="eagle_lookahead",
        ),
        Case(
            f"{p}_eagle_drop", trace, "EAGLE, legacy last-block drop", b, spec_decode="eagle_drop"
        ),
        Case(
            f"{p}_combined",
            trace,
            f"budget {budget_odd} + retention {2 * b} + {combined_blocks} blocks + SWA(W={window})",
            b,
            groups=(FA, SWA, MAMBA),
            retention_interval=2 * b,
            sliding_window=window,
            max_num_batched_tokens=budget_odd,
            num_blocks=combined_blocks,
        ),
    ]


def _multiturn() -> list[Case]:
    cases = [
        Case("chat64_b64_ret0", "chat64", "multi-turn with outputs, retention 0", 64),
        Case(
            "chat64_b64_retnull",
            "chat64",
            "multi-turn, retention null",
            64,
            retention_interval=None,
        ),
        Case(
            "chat64_b64_ret128", "chat64", "multi-turn, retention 128", 64, retention_interval=128
        ),
        Case(
            "chat64_b64_budget100_retnull",
            "chat64",
            "multi-turn, budget 100, retention null",
            64,
            retention_interval=None,
            max_num_batched_tokens=100,
        ),
        Case("chat64_b64_fa_only", "chat64", "multi-turn, FA only", 64, groups=(FA,)),
        Case(
            "chat64_b64_unit16",
            "chat64",
            "multi-turn, prefix_match_unit 16",
            64,
            prefix_match_unit=16,
        ),
        Case(
            "chat64_b64_eagle_lookahead",
            "chat64",
            "multi-turn, EAGLE lookahead",
            64,
            spec_decode="eagle_lookahead",
        ),
        Case(
            "chat64_b64_eagle_drop",
            "chat64",
            "multi-turn, EAGLE legacy drop",
            64,
            spec_decode="eagle_drop",
        ),
        Case(
            "chat64_b64_combined",
            "chat64",
            "multi-turn, budget 100 + retention 128 + 30 blocks + SWA(W=100)",
            64,
            groups=(FA, SWA, MAMBA),
            retention_interval=128,
            sliding_window=100,
            max_num_batched_tokens=100,
            num_blocks=30,
        ),
        Case("mixed40_b544_ret0", "mixed40", "synth mixed, retention 0", 544),
        Case(
            "mixed40_b544_retnull",
            "mixed40",
            "synth mixed, retention null",
            544,
            retention_interval=None,
        ),
        Case(
            "mixed40_b544_budget2048_ret0",
            "mixed40",
            "synth mixed, budget 2048",
            544,
            max_num_batched_tokens=2048,
        ),
        Case("mixed40_b64_ret0", "mixed40", "synth mixed, B=64, retention 0", 64),
        Case(
            "mixed40_b64_retnull",
            "mixed40",
            "synth mixed, B=64, retention null",
            64,
            retention_interval=None,
        ),
    ]
    return cases


CASES: dict[str, Case] = {
    c.name: c
    for c in [
        *_spec6_diag(),
        *_spec6_groups(),
        # Pool sizes from a scan (ret 0): tree544 needs >= 7 blocks to schedule every request
        # (unbounded hit 69,088; 10 blocks: 34,816), its combined case >= 12; tree64 needs
        # >= 12 (unbounded 19,712; 20 blocks: 10,880), its combined case >= 20.
        *_coverage(
            "tree544",
            544,
            budget_odd=1000,
            window=1024,
            unit=32,
            blocks=(10, 7),
            combined_blocks=12,
        ),
        *_coverage(
            "tree64", 64, budget_odd=100, window=100, unit=16, blocks=(20, 12), combined_blocks=20
        ),
        *_multiturn(),
    ]
}


# --------------------------------------------------------------------------------------------
# Running the oracle
# --------------------------------------------------------------------------------------------


def _oracle_env() -> dict[str, str]:
    env = dict(os.environ)
    # The oracle's sha256 NONE_HASH seed is fixed unless PYTHONHASHSEED is set.
    env.pop("PYTHONHASHSEED", None)
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    return env


def run_oracle(case: Case, python: str, script: str, trace_path: str) -> tuple[list, dict, dict]:
    """(per-request results, summary, config) of `case` replayed on `trace_path`."""
    cmd = [python, script, *case.oracle_args(trace_path)]
    proc = subprocess.run(cmd, cwd=REPO, env=_oracle_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.splitlines()[-20:])
        raise RuntimeError(f"oracle failed for {case.name} (rc {proc.returncode}):\n{tail}")
    config = {}
    for line in proc.stderr.splitlines():
        if line.startswith('{"config"'):
            config = json.loads(line)["config"]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    if not rows or not rows[-1].get("summary"):
        raise RuntimeError(f"oracle output of {case.name} has no summary line")
    return rows[:-1], rows[-1], config


def expected_lines(rows: list, summary: dict, config: dict) -> str:
    out = []
    for row in rows:
        rec = {key: row[key] for key in REQUEST_FIELDS}
        rec["chunks"] = row["chunks"]
        for key in ("per_group", "error"):
            if key in row:
                rec[key] = row[key]
        out.append(json.dumps(rec, separators=(",", ":")))
    tail = {"summary": True, **{key: summary[key] for key in SUMMARY_FIELDS}}
    tail["oracle_config"] = config
    out.append(json.dumps(tail, separators=(",", ":")))
    return "\n".join(out) + "\n"


_SCALAR_LIST = re.compile(r"\[\n\s*([^\[\]{}]*?)\n\s*\]")


def _one_line(match: re.Match) -> str:
    return "[" + ", ".join(item.strip() for item in match[1].split(",\n")) + "]"


def cases_json() -> str:
    doc = {
        "about": (
            "Golden per-request results of vLLM 0.33.0's real Scheduler + KVCacheManager "
            "(../shared/oracle/vllm_oracle.py) on small deterministic traces. Regenerate with "
            "`python tools/oracle/make_goldens.py`."
        ),
        "oracle": ORACLE_VERSION,
        "notes": {
            "paths": "trace and expected are file names inside tests/golden/oracle/; "
            "oracle_command and oracle_args run from the repository root (python = "
            "$HPA_ORACLE_PYTHON, default shown).",
            "expected": "one JSON line per request (request_id, queried, hit, "
            "uncached_common = sparse-retention miss, junction, attn_match = hit + "
            "uncached_common, chunks = scheduled tokens per step (decode steps are 1), "
            "per_group = independent per-group hits before admission in group order "
            "full, [sliding_window], mamba; error if unschedulable), then a summary line.",
            "num_blocks": "num_blocks = --num-gpu-blocks = vLLM's num_gpu_blocks: the size of "
            "ONE BlockPool shared by all KV-cache groups (every group's block table takes "
            "block ids from it; KVCacheConfig.num_blocks). Block 0 is reserved as the null "
            "block, so num_blocks - 1 are usable. Each group of a running request holds its "
            "own blocks from that pool: full attention ceil(computed/B); sliding window only "
            "the blocks inside the window (older ones are freed and replaced by the null "
            "block); Mamba in align mode only the current state block plus the blocks of "
            "kept checkpoints (older state blocks are freed while the request runs). Cached "
            "(hashed) free blocks stay as eviction candidates (LRU) in the same pool. The "
            "oracle has one block table per group (--num-*-groups 1).",
            "spec_decode": "eagle_lookahead = --eagle (num_hash_lookahead_tokens=1, 1 "
            "speculative token); eagle_drop = --eagle --eagle-legacy-drop.",
            "groups": "[full_attention] = --mamba-mode off; mamba = --mamba-mode align; "
            "sliding_window = --sliding-window W.",
            "trace_format": "the oracle's: request_id, prompt_token_ids, output_token_ids "
            "(when present). Requests replay serially in file order.",
        },
        "cases": {
            c.name: {
                "description": c.description,
                "trace": TRACES[c.trace].file,
                "expected": f"{c.name}.expected.jsonl",
                "policy": c.policy(),
                "oracle_args": c.oracle_args(),
                "oracle_command": c.command(),
                **({"spec6": c.spec6} if c.spec6 else {}),
            }
            for c in CASES.values()
        },
    }
    text = json.dumps(doc, indent=2)
    # Lists of scalars on one line (JSON strings never hold a raw newline, so this is safe).
    return _SCALAR_LIST.sub(_one_line, text) + "\n"


def _fmt_policy(c: Case) -> str:
    parts = ["+".join({FA: "FA", SWA: f"SWA{c.sliding_window}", MAMBA: "M"}[g] for g in c.groups)]
    parts.append(f"B={c.block_size}")
    if c.prefix_match_unit:
        parts.append(f"unit={c.prefix_match_unit}")
    if MAMBA in c.groups:
        parts.append(f"ret={'null' if c.retention_interval is None else c.retention_interval}")
    if c.max_num_batched_tokens:
        parts.append(f"budget={c.max_num_batched_tokens}")
    if c.num_blocks:
        parts.append(f"blocks={c.num_blocks}")
    if c.spec_decode != "none":
        parts.append(c.spec_decode)
    return " ".join(parts)


README_HEAD = """\
# vLLM oracle goldens

Golden per-request prefix-cache results produced by **vLLM 0.33.0's own** v1 scheduler and
KV-cache manager (`Scheduler` -> `KVCacheManager` -> `HybridKVCacheCoordinator` -> `BlockPool`
+ `FullAttentionManager` / `SlidingWindowManager` / `MambaManager`), driven on the CPU with a
fake model runner by `../shared/oracle/vllm_oracle.py` (see its README). They let `make test`
check the replay against vLLM **without vLLM installed**. Generated by
`tools/oracle/make_goldens.py`; do not edit by hand.

Files:

* `*.trace.jsonl`: the input traces in the oracle's format (`request_id`, `prompt_token_ids`,
  `output_token_ids` when present), replayed serially in file order. Several cases share one
  trace.
* `<case>.expected.jsonl`: one line per request, copied from the oracle output: `request_id`,
  `queried`, `hit`, `uncached_common` (the sparse-retention miss), `junction`, `attn_match`
  (= hit + uncached_common), `chunks` (tokens scheduled per step; decode steps are 1),
  `per_group` (independent per-group hit looked up before admission, read-only; group order
  full, [sliding_window], mamba) and `error` when a request could not be scheduled; then one
  summary line (`"summary": true`, totals, `hit_rate`, `free_blocks_end`, and `oracle_config`,
  the configuration vLLM resolved). Timings are left out so the files are deterministic.
* `cases.json`: `cases` maps each case to its trace, its replay policy (`engine`,
  `groups`, `block_size`, `prefix_match_unit`, `retention_interval`, `sliding_window`,
  `max_num_batched_tokens`, `num_blocks`, `spec_decode`), the exact oracle arguments and
  command (run from the repo root), and for the worked examples of
  `docs/definitions.md` what they state (`spec6`).
  `notes.num_blocks` explains how vLLM counts `num_gpu_blocks`: one pool shared by all groups,
  block 0 reserved as the null block.

## Regenerate

```bash
.venv/bin/python tools/oracle/make_goldens.py              # all cases, 2 oracle runs at a time
.venv/bin/python tools/oracle/make_goldens.py --case NAME  # one case (repeatable)
.venv/bin/python tools/oracle/make_goldens.py --check      # verify the files, write nothing
.venv/bin/python tools/oracle/make_goldens.py --list       # the cases
```

`HPA_ORACLE_PYTHON` (default `~/.cache/hpa-oracle/bin/python`) and `HPA_ORACLE_SCRIPT`
(default `../shared/oracle/vllm_oracle.py`, relative to the repo root) locate the oracle.
Traces are seeded (numpy `default_rng`; `analyzer.traces.synth.generate` for the `diag_*`,
`groups_*` and `mixed40` traces), so a rerun is byte-identical (`--check` confirms it). Each
oracle run costs 10-20 s of vLLM/torch start-up; all cases take 12-20 minutes on 2 shared cores.
The `tree*` and `chat*` traces draw token ids from a vocabulary of 10 to keep the files small
(2 bytes a token); ids that agree by chance can move a junction by a token or two, which does
not matter: the oracle's answer is the truth for whatever the trace holds. Every case runs with
`--per-group`, which is a read-only lookup (checked: identical results without it, 7-block
eviction case included).

## Oracle venv (outside the repo; not a project dependency)

```bash
python3 -m venv ~/.cache/hpa-oracle
~/.cache/hpa-oracle/bin/pip install torch==2.13.0
~/.cache/hpa-oracle/bin/pip install --no-deps vllm==0.33.0 \\
    -r ../shared/oracle/requirements-min.txt
~/.cache/hpa-oracle/bin/pip install --no-deps einops==0.8.2  # missing from that list
cd ../shared/oracle && ~/.cache/hpa-oracle/bin/python vllm_oracle.py --self-test
```

`requirements-min.txt` lacks `einops`: vLLM's model registry imports it while `ModelConfig`
inspects the stub architecture, and without it the self-test fails with
`Model architectures ['LlamaForCausalLM'] failed to be inspected`. The venv is about 2 GB.

"""


def readme(summaries: dict[str, dict]) -> str:
    lines = [
        README_HEAD.rstrip("\n"),
        "",
        "## Traces",
        "",
        "| trace | what |",
        "| --- | --- |",
    ]
    for trace in TRACES.values():
        lines.append(f"| `{trace.file}` | {trace.description} |")
    lines += [
        "",
        "## Cases",
        "",
        "Totals over the trace (tokens): queried, hit, uncached (sparse-retention miss), and",
        "errors. Policy: groups (M = Mamba align), B, then the keys that differ from the defaults.",
        "",
        "| case | trace | policy | requests | queried | hit | uncached | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in CASES.values():
        s = summaries.get(c.name)
        if s is None:
            nums = "| ? | ? | ? | ? | ? |"
        else:
            nums = (
                f"| {s['requests']} | {s['queries']:,} | {s['hits']:,} | "
                f"{s['uncached_common']:,} | {s['errors']} |"
            )
        lines.append(f"| `{c.name}` | `{c.trace}` | {_fmt_policy(c)} {nums}")
    lines += [
        "",
        "## The worked examples of docs/definitions.md",
        "",
        "Every worked example of `docs/definitions.md` (and the oracle README's variants) is a",
        "`spec6_*` case; `cases.json` keeps what the text states beside it (`spec6`: hit/uncached",
        "per request, or totals). Verdict of the oracle against that text:",
        "",
        "| case | worked example / README statement | oracle |",
        "| --- | --- | --- |",
    ]
    for c in CASES.values():
        verdict = spec6_verdict(c)
        if verdict is not None:
            stated = json.dumps(c.spec6, separators=(",", ":")).replace("|", "/")
            lines.append(f"| `{c.name}` | `{stated}` | {verdict} |")
    lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def spec6_verdict(case: Case) -> str | None:
    """'agrees' / 'DISAGREES: ...' for a case with a worked example's expectation, from its
    golden file."""
    path = GOLDEN / f"{case.name}.expected.jsonl"
    if case.spec6 is None or not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    summary, rows = rows[-1], rows[:-1]
    if "hit_uncached" in case.spec6:
        want = [list(pair) for pair in case.spec6["hit_uncached"]]
        got = [[r["hit"], r["uncached_common"]] for r in rows]
    else:
        want = [case.spec6["queried"], case.spec6["hit"], case.spec6["uncached"]]
        got = [summary["queries"], summary["hits"], summary["uncached_common"]]
    return "agrees" if got == want else f"DISAGREES: stated {want}, oracle {got}"


def _summary_of(path: Path) -> dict | None:
    if not path.exists():
        return None
    last = path.read_text().rstrip("\n").rsplit("\n", 1)[-1]
    return json.loads(last)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", default=[], help="only this case (repeatable)")
    ap.add_argument("--check", action="store_true", help="compare with the files, write nothing")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--jobs", type=int, default=2, help="oracle runs in parallel (default 2)")
    ap.add_argument(
        "--oracle-python", default=os.environ.get("HPA_ORACLE_PYTHON", DEFAULT_ORACLE_PYTHON)
    )
    ap.add_argument(
        "--oracle-script", default=os.environ.get("HPA_ORACLE_SCRIPT", DEFAULT_ORACLE_SCRIPT)
    )
    args = ap.parse_args(argv)
    args.oracle_python = os.path.expanduser(args.oracle_python)
    if args.list:
        for c in CASES.values():
            print(f"{c.name:50s} {c.trace:28s} {_fmt_policy(c)}")
        return 0
    unknown = [name for name in args.case if name not in CASES]
    if unknown:
        ap.error(f"unknown case(s): {', '.join(unknown)}")
    selected = [CASES[n] for n in (args.case or CASES)]
    script = str((REPO / args.oracle_script).resolve())
    if not Path(args.oracle_python).exists() or not Path(script).exists():
        ap.error(f"oracle not found: {args.oracle_python} {script} (see {GOLDEN_REL}/README.md)")

    mismatches: list[str] = []

    def emit(path: Path, text: str) -> None:
        if args.check:
            if not path.exists() or path.read_text() != text:
                mismatches.append(str(path.relative_to(REPO)))
        else:
            path.write_text(text)

    GOLDEN.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hpa_goldens_") as tmp:
        trace_paths: dict[str, str] = {}
        for name in dict.fromkeys(c.trace for c in selected):
            trace = TRACES[name]
            tmp_path = Path(tmp) / trace.file
            write_jsonl(trace.build(), tmp_path)
            emit(GOLDEN / trace.file, tmp_path.read_text())
            trace_paths[name] = str(tmp_path)

        def one(case: Case) -> tuple[str, str, dict]:
            rows, summary, config = run_oracle(
                case, args.oracle_python, script, trace_paths[case.trace]
            )
            return case.name, expected_lines(rows, summary, config), summary

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for name, text, summary in pool.map(one, selected):
                emit(GOLDEN / f"{name}.expected.jsonl", text)
                print(
                    f"{name}: queried {summary['queries']} hit {summary['hits']} "
                    f"uncached {summary['uncached_common']} errors {summary['errors']}",
                    file=sys.stderr,
                    flush=True,
                )

    summaries = {c: _summary_of(GOLDEN / f"{c}.expected.jsonl") for c in CASES}
    emit(GOLDEN / "cases.json", cases_json())
    emit(GOLDEN / "README.md", readme({k: v for k, v in summaries.items() if v}))
    if mismatches:
        print("differs from the committed goldens:\n  " + "\n  ".join(mismatches), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
