"""Traces and cases of the vLLM oracle's CONCURRENT goldens (``make_concurrent_goldens.py``).

The seeded trace (``conc_records``) has these request kinds:

* ``new``: a family's system prompt + a user message;
* ``turn``: a multi-turn follow-up, an earlier request's prompt + its ``output_token_ids`` + a new
  message (the parent is one of the last 12 requests, so it may still be decoding when the
  follow-up arrives);
* ``burst``: 4-16 requests a few milliseconds apart sharing a system prompt + a new document,
  each with its own question;
* ``unique``: unrelated tokens.

Arrivals are a Poisson process; every gap is at least ``MIN_GAP_S`` so that with
``--time-scale 1000`` no two requests overlap (the replay then equals serial mode). Token ids
come from a vocabulary of 10 (2 bytes a token in the files, as in ``make_goldens.py``): the
oracle's answer is the truth for whatever the trace holds.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from make_goldens import DEFAULT_ORACLE_SCRIPT, FA, MAMBA, SWA, oracle_command

GOLDEN_REL = "tests/golden/oracle_concurrent"
ASYNC_ORACLE_SCRIPT = "tools/oracle/vllm_async_oracle.py"
SEED, NUM_REQUESTS, RATE = 11, 150, 10.0


MIN_GAP_S = 0.002  # x 1000 = 2 s, longer than any request of this trace takes alone
MAX_PROMPT = 3000  # a follow-up that would be longer starts a new conversation instead
KINDS = ("new", "turn", "burst", "unique")
KIND_WEIGHTS = (0.35, 0.4, 0.08, 0.17)


class _Gen:
    def __init__(self, seed: int, vocab: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.vocab = vocab

    def tokens(self, lo: int, hi: int) -> np.ndarray:
        """Between lo and hi (inclusive) random token ids."""
        n = int(self.rng.integers(lo, hi + 1))
        return self.rng.integers(0, self.vocab, size=n, dtype=np.int32)

    def outputs(self) -> np.ndarray:
        return self.tokens(1, 60)


def _systems(g: _Gen) -> list[np.ndarray]:
    """Five system prompts: three share a preamble, two are unrelated."""
    preamble = g.tokens(200, 400)
    shared = [np.concatenate([preamble, g.tokens(100, 500)]) for _ in range(3)]
    return shared + [g.tokens(300, 1000) for _ in range(2)]


def _prompt(g: _Gen, kind: str, systems: list, history: list) -> tuple[str, np.ndarray]:
    """(kind, prompt) of one single request; a follow-up that would be too long is 'new'."""
    if kind == "turn" and history:
        parent_prompt, parent_output = history[-1 - int(g.rng.integers(min(12, len(history))))]
        prompt = np.concatenate([parent_prompt, parent_output, g.tokens(30, 300)])
        if len(prompt) <= MAX_PROMPT:
            return kind, prompt
    if kind == "unique":
        return kind, g.tokens(200, 1500)
    system = systems[int(g.rng.integers(len(systems)))]
    return "new", np.concatenate([system, g.tokens(50, 800)])


def conc_records(
    seed: int, num_requests: int, rate: float, vocab: int = 10, *, min_gap: float = MIN_GAP_S
) -> Iterator[dict]:
    """`num_requests` records in arrival order (oracle format, timestamps in seconds)."""
    g = _Gen(seed, vocab)
    systems = _systems(g)
    history: list[tuple[np.ndarray, np.ndarray]] = []
    t, i, bursts = 0.0, 0, 0
    while i < num_requests:
        t += max(min_gap, float(g.rng.exponential(1.0 / rate)))
        kind = KINDS[int(g.rng.choice(len(KINDS), p=KIND_WEIGHTS))]
        if kind == "burst":
            size = min(int(g.rng.integers(4, 17)), num_requests - i)
            system = systems[int(g.rng.integers(len(systems)))]
            head = np.concatenate([system, g.tokens(300, 1000)])
            for j in range(size):
                if j:
                    t += min_gap + float(g.rng.exponential(0.004))
                prompt, output = np.concatenate([head, g.tokens(20, 200)]), g.outputs()
                history.append((prompt, output))
                yield _record(f"r{i:03d}-burst{bursts}", t, prompt, output)
                i += 1
            bursts += 1
            continue
        kind, prompt = _prompt(g, kind, systems, history)
        output = g.outputs()
        history.append((prompt, output))
        yield _record(f"r{i:03d}-{kind}", t, prompt, output)
        i += 1


def _record(request_id: str, t: float, prompt: np.ndarray, output: np.ndarray) -> dict:
    return {
        "request_id": request_id,
        "prompt_token_ids": prompt.tolist(),
        "output_token_ids": output.tolist(),
        "timestamp": round(t, 6),
    }


# --------------------------------------------------------------------------------------------
# Traces and cases
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trace:
    name: str
    description: str
    build: Callable[[Path], str]  # oracle traces folder -> file text

    @property
    def file(self) -> str:
        return f"{self.name}.trace.jsonl"


def _copied(name: str) -> Callable[[Path], str]:
    return lambda traces: (traces / f"{name}.jsonl").read_text()


def _seeded(traces: Path) -> str:
    records = conc_records(SEED, NUM_REQUESTS, RATE)
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)


def _fuzzed(seed: int, index: int) -> Callable[[Path], str]:
    """The trace of `fuzz_concurrent`'s case (seed, index) (EAGLE share 0.25, its default)."""

    def make(_traces: Path) -> str:
        root = str(Path(__file__).resolve().parents[2])
        if root not in sys.path:
            sys.path.insert(0, root)
        from tests.sim.vllm.fuzz_concurrent import make_case  # one generator for both tools

        records = make_case(seed, index, 0.25)["trace"]
        return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)

    return make


TRACES: dict[str, Trace] = {
    t.name: t
    for t in [
        Trace(
            "conc_burst8",
            "oracle's traces/conc_burst8.jsonl: 8 requests at t=0, a new 3,000-token prefix "
            "+ 600 own tokens, 16 outputs each",
            _copied("conc_burst8"),
        ),
        Trace(
            "conc_midprefill",
            "oracle's traces/conc_midprefill.jsonl: m0 12,000 tokens at 0 s; m1 = m0[:10000] "
            "+ 500 at 0.5 s (mid-prefill); m2 = m0[:10000] + 500 others at 10 s",
            _copied("conc_midprefill"),
        ),
        Trace(
            "conc_preempt",
            "oracle's traces/conc_preempt.jsonl: 4 unrelated 1,000-token prompts with 400 "
            "outputs each, at t=0",
            _copied("conc_preempt"),
        ),
        Trace(
            f"mix{NUM_REQUESTS}",
            f"seeded (concurrent_cases.conc_records, seed {SEED}, vocab 10): {NUM_REQUESTS} "
            f"requests, Poisson arrivals at {RATE:g}/s (gaps >= 2 ms), 5 system prompts (3 "
            "share a preamble), multi-turn follow-ups carrying a recent request's prompt + "
            "outputs, bursts of 4-16 sharing system + document, unique prompts; prompts "
            "245-2,113 tokens, 1-60 outputs",
            _seeded,
        ),
        Trace(
            "fuzz_s46_c3",
            "fuzz_concurrent's case s46-c3: 120 requests over ~1.1 s (time scale 0.456) on a "
            "4-block pool: most refused, 16 preemptions",
            _fuzzed(46, 3),
        ),
        Trace(
            "fuzz_s46_c14",
            "fuzz_concurrent's case s46-c14: 45 requests over ~0.4 s (time scale 0.375) on an "
            "11-block pool, 9 preemptions",
            _fuzzed(46, 14),
        ),
        Trace(
            "fuzz_s11_c4",
            "fuzz_concurrent's case s11-c4: 61 requests over ~1.1 s (time scale 0.4), families, "
            "follow-ups, branches and resends on a 40-block pool (12 preemptions)",
            _fuzzed(11, 4),
        ),
    ]
}
MIX = f"mix{NUM_REQUESTS}"


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
    max_num_batched_tokens: int = 8192
    num_blocks: int = 100_000
    spec_decode: str = "none"
    max_num_seqs: int = 256
    step_base_ms: int = 5
    step_token_us: int = 100
    time_scale: float = 1.0
    serial_check: bool = False  # also replay serially; per-request results should be equal
    # vLLM's AsyncScheduler with two batches in flight (vllm_async_oracle.py), as vllm serve
    # runs by default; false: the oracle's synchronous loop
    async_scheduling: bool = False

    def __post_init__(self) -> None:
        assert self.trace in TRACES, self.trace
        assert (SWA in self.groups) == (self.sliding_window is not None), self.name
        assert self.spec_decode in ("none", "eagle_lookahead"), self.name

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
            "schedule": "concurrent",
            "max_num_seqs": self.max_num_seqs,
            "step_base_ms": self.step_base_ms,
            "step_token_us": self.step_token_us,
            "time_scale": self.time_scale,
            "async_scheduling": self.async_scheduling,
        }

    def cache_args(self) -> list[str]:
        """The flags that serial mode shares (trace path excluded)."""
        retention = "None" if self.retention_interval is None else str(self.retention_interval)
        args = ["--block-size", str(self.block_size)]
        args += ["--mamba-mode", "align" if MAMBA in self.groups else "off"]
        args += ["--retention-interval", retention]
        if self.prefix_match_unit is not None:
            args += ["--prefix-match-unit", str(self.prefix_match_unit)]
        if SWA in self.groups:
            args += ["--sliding-window", str(self.sliding_window)]
        args += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        args += ["--num-gpu-blocks", str(self.num_blocks)]
        return args + (["--eagle"] if self.spec_decode == "eagle_lookahead" else [])

    def oracle_args(self, trace_path: str | None = None) -> list[str]:
        path = trace_path or f"{GOLDEN_REL}/{TRACES[self.trace].file}"
        args = ["--trace", path, "--concurrent", *self.cache_args()]
        if self.async_scheduling:
            args.insert(0, "--async-scheduling")
        args += ["--max-num-seqs", str(self.max_num_seqs), "--time-scale", str(self.time_scale)]
        return args + [
            "--step-base-ms",
            str(self.step_base_ms),
            "--step-token-us",
            str(self.step_token_us),
        ]

    @property
    def script(self) -> str:
        """The oracle script (the async one wraps the oracle and adds the batch queue)."""
        return ASYNC_ORACLE_SCRIPT if self.async_scheduling else DEFAULT_ORACLE_SCRIPT

    def command(self) -> str:
        return oracle_command(self.script, self.oracle_args())


def _hand_made() -> list[Case]:
    fa16 = {"block_size": 16, "groups": (FA,)}
    return [
        Case("conc_burst8_b544", "conc_burst8", "burst of 8, FA+Mamba align, B=544", 544),
        Case("conc_burst8_b16_fa", "conc_burst8", "burst of 8, FA only, B=16", **fa16),
        Case(
            "conc_midprefill_b544_budget2048",
            "conc_midprefill",
            "arrival mid-prefill, budget 2048, FA+Mamba align, B=544",
            544,
            max_num_batched_tokens=2048,
        ),
        Case(
            "conc_midprefill_b16_fa_budget2048",
            "conc_midprefill",
            "arrival mid-prefill, budget 2048, FA only, B=16",
            max_num_batched_tokens=2048,
            **fa16,
        ),
        Case(
            "conc_preempt_b16_fa_blocks300",
            "conc_preempt",
            "decode growth preempts the last admitted (recompute), FA only, B=16, 300 blocks",
            num_blocks=300,
            **fa16,
        ),
        Case(
            "conc_preempt_b544_blocks12",
            "conc_preempt",
            "repeated preemption, FA+Mamba align, B=544, 12 blocks",
            544,
            num_blocks=12,
        ),
    ]


def _seeded_cases() -> list[Case]:
    # Pools from a scan of this trace (align 544: 150 blocks evict without preempting, 100 give
    # 8 preemptions, 60 give 25, 40-50 give 26; FA 16: 500 blocks give 3, 250 give 9).
    p = f"{MIX}_b544"
    return [
        Case(p, MIX, "FA+Mamba align, B=544, unbounded pool", 544),
        Case(f"{p}_blocks60", MIX, "60-block pool: eviction and preemption", 544, num_blocks=60),
        Case(f"{MIX}_b16_fa", MIX, "FA only, B=16, unbounded pool", 16, groups=(FA,)),
        Case(
            f"{MIX}_b16_fa_blocks250",
            MIX,
            "FA only, B=16, 250-block pool: eviction and preemption",
            16,
            groups=(FA,),
            num_blocks=250,
        ),
        Case(f"{p}_budget2048", MIX, "budget 2048", 544, max_num_batched_tokens=2048),
        Case(f"{p}_retnull", MIX, "retention null", 544, retention_interval=None),
        Case(f"{p}_unit32", MIX, "prefix_match_unit 32", 544, prefix_match_unit=32),
        Case(
            f"{p}_ts1000",
            MIX,
            "time scale 1000: no two requests overlap, so it equals serial mode",
            544,
            time_scale=1000.0,
            serial_check=True,
        ),
    ]


def _seeded_swa_eagle() -> list[Case]:
    """SWA and EAGLE with an unbounded pool (on this trace their per-request rows equal the
    plain case's) and with 60 blocks (where both differ from the plain 60-block case)."""
    p, swa = f"{MIX}_b544", {"groups": (FA, SWA, MAMBA), "sliding_window": 1024}
    eagle = {"spec_decode": "eagle_lookahead"}
    return [
        Case(f"{p}_swa1024", MIX, "FA + SWA(W=1024) + Mamba", 544, **swa),
        Case(f"{p}_eagle", MIX, "EAGLE lookahead hashes", 544, **eagle),
        Case(f"{p}_blocks60_swa1024", MIX, "SWA(W=1024), 60 blocks", 544, num_blocks=60, **swa),
        Case(f"{p}_blocks60_eagle", MIX, "EAGLE lookahead, 60 blocks", 544, num_blocks=60, **eagle),
    ]


def _fuzzed_cases() -> list[Case]:
    """Cases the fuzzer found a fault with, kept as goldens."""
    return [
        Case(
            "fuzz_s11_c4_b112_blocks40",
            "fuzz_s11_c4",
            "FA+Mamba align B=112, retention null, 40 blocks, budget 2451, time scale 0.4: a "
            "request woken from quiet decoding must be scheduled in running order, before the "
            "one that preempts itself",
            112,
            retention_interval=None,
            num_blocks=40,
            max_num_batched_tokens=2451,
            time_scale=0.4,
        )
    ]


def _async_twins(cases: list[Case]) -> list[Case]:
    """Every case without a drafter again under vLLM's async scheduling (`<case>_async`), as
    vllm serve runs: two batches in flight (a drafter keeps hpa on the synchronous loop)."""
    return [
        replace(
            c,
            name=f"{c.name}_async",
            description=f"{c.description}; async scheduling",
            async_scheduling=True,
            serial_check=False,
        )
        for c in cases
        if c.spec_decode == "none"
    ]


_SYNC = [*_hand_made(), *_seeded_cases(), *_seeded_swa_eagle(), *_fuzzed_cases()]


def _fuzzed_async() -> list[Case]:
    """Async cases the fuzzer (`--async-scheduling`) found a fault with, kept as goldens."""
    return [
        Case(
            "fuzz_s46_c3_b432_blocks4_async",
            "fuzz_s46_c3",
            "FA+Mamba align B=432, 4 blocks, budget 3291, time scale 0.456, async: a request "
            "that preempts itself alone is aborted once nothing runs, after its step in flight "
            "returned (not at the preemption)",
            432,
            num_blocks=4,
            max_num_batched_tokens=3291,
            time_scale=0.456,
            async_scheduling=True,
        ),
        Case(
            "fuzz_s46_c14_b240_blocks11_async",
            "fuzz_s46_c14",
            "FA+Mamba align B=240, retention 960, 11 blocks, budget 1241, time scale 0.375, "
            "async: a request preempting itself alone is not aborted while a step is in "
            "flight (its finished requests free blocks; it resumes and finishes)",
            240,
            retention_interval=960,
            num_blocks=11,
            max_num_batched_tokens=1241,
            time_scale=0.375,
            async_scheduling=True,
        ),
    ]


CASES: dict[str, Case] = {c.name: c for c in [*_SYNC, *_async_twins(_SYNC), *_fuzzed_async()]}
