"""The engine table: every engine a policy may name, the module that replays it, and its
design in one line (the report's engine comparison prints it).

Adding an engine is one package `analyzer/sim/<name>/` and one row here (its options are rows
of `analyzer/config/options.py` whose `engine` is the name; its preset is
`analyzer/schemas/policies/<name>-default.json`). The sim layer imports `module` on first use
(`analyzer.sim.dispatch`); this table never imports an engine, so config stays below sim.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.errors import ConfigError


@dataclass(frozen=True)
class Engine:
    """One engine. `module`: the package exposing `replay(requests, policy, *, num_groups)`
    (and optionally `check_policy(policy)`, `hit_alignment(policy)`); `design`: where it keeps
    recurrent state, in one line; `preset`: its policy preset
    (`analyzer/schemas/policies/<preset>.json`); `bound`: an unbounded reference cache, not
    an engine; `schedules`: the policy `schedule`s it replays (`analyzer.config.schedule`;
    only vLLM's scheduler is modelled concurrently); `keeps_computed`: with num_blocks null
    it keeps every attention block it computes, so what full attention lacks there was never
    cached (granularity), not evicted."""

    name: str
    module: str
    preset: str
    design: str
    bound: bool = False
    schedules: tuple[str, ...] = ("serial",)
    keeps_computed: bool = True


_ROWS = (
    Engine(
        "vllm",
        "analyzer.sim.vllm",
        "vllm-default",
        "vLLM 0.33 align mode: states at block-aligned junctions, replay boundaries "
        "and every retention interval",
        schedules=("serial", "concurrent"),
    ),
    Engine(
        "sglang",
        "analyzer.sim.sglang",
        "sglang-default",
        "SGLang radix cache: states at chunk ends and sequence ends (no_buffer) or "
        "at aligned track points and branch points (extra_buffer)",
    ),
    Engine(
        "marconi",
        "analyzer.sim.marconi",
        "marconi-default",
        "Marconi: states only at branch points and sequence ends; FLOP-aware eviction",
    ),
    Engine(
        "trtllm",
        "analyzer.sim.trtllm",
        "trtllm-default",
        "TensorRT-LLM: a snapshot every interval tokens (and the prompt end)",
    ),
    Engine(
        "llamacpp",
        "analyzer.sim.llamacpp",
        "llamacpp-default",
        "llama.cpp: a few context checkpoints per slot near each prompt's end",
        keeps_computed=False,  # a slot's cache is overwritten by the next request in it
    ),
    Engine(
        "suffix_replay",
        "analyzer.sim.suffix_replay",
        "suffix_replay-default",
        "SuffixReplay: no states; the last R matched tokens are replayed",
    ),
    Engine(
        "attention_only",
        "analyzer.sim.bounds",
        "attention-only",
        "bound: a dense model's reuse (no sparse group)",
        bound=True,
    ),
    Engine(
        "oracle",
        "analyzer.sim.bounds",
        "oracle",
        "bound: a state checkpoint at every junction, unbounded cache",
        bound=True,
    ),
)

ENGINES: dict[str, Engine] = {row.name: row for row in _ROWS}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)
BOUNDS: tuple[str, ...] = tuple(name for name, row in ENGINES.items() if row.bound)


def engine(name: str) -> Engine:
    """The table's row for `name`; ConfigError listing the known engines otherwise."""
    row = ENGINES.get(name)
    if row is None:
        raise ConfigError(f"no replay for engine {name!r}; known: {', '.join(ENGINES)}")
    return row
