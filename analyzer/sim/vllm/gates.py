"""What each shortcut of the `vllm` engine models, as data, and the gates built from it.

A shortcut (a closed form, a compiled loop, the one-pass capacity curve, the sleeping
decoders of the reference and concurrent replays) reproduces the block-level reference
(`reference.VllmReplay`) only for the layouts it was written for. Each one names here the
fields of `CacheLayout` it models (`Gate.models`: every value, within its `condition`) and
those it does not (`Gate.refuses`): it runs only while each of those holds its inert value
(`INERT`: the value the field has when what it carries is off). A field named in neither
list is refused too (the gate is an allow-list), and `tests/sim/vllm/test_gates.py` fails
until every gate names every field: a new layout field (a host tier, say) forces a decision
in each shortcut before it can be skipped by one.

The policy keys no layout field carries are gated the same way: `POLICY_GATE` lists those the
layout is made from (`layout.LAYOUT_KEYS`) and those a cache's serial replay never reads
(`layout.OUTSIDE_CACHE_KEYS`); any other key set away from its default sends the replay to
the reference (`unmodelled_keys`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from analyzer.config.options import OPTIONS
from analyzer.config.policy import BASE_KEYS, Policy
from analyzer.sim.vllm.layout import (
    FULL,
    LAYOUT_KEYS,
    OUTSIDE_CACHE_KEYS,
    CacheLayout,
    decode_events,
)

LAYOUT_FIELDS = tuple(f.name for f in fields(CacheLayout))

# Per layout field, its inert value (a function of the layout where it is relative: the
# match unit is inert at the block size). Fields absent here (block_size, group_types) are
# in every layout: each gate must model them.
INERT: dict[str, Callable[[CacheLayout], Any]] = {
    "hash_block_size": lambda layout: layout.block_size,
    "fine": lambda layout: False,
    "alignment": lambda layout: layout.block_size,
    "sliding_window": lambda layout: None,
    "retention_interval": lambda layout: 0,
    "max_num_batched_tokens": lambda layout: None,
    "num_blocks": lambda layout: None,
    "hash_lookahead": lambda layout: 0,
    "eagle_drop": lambda layout: False,
    "alloc_lookahead": lambda layout: 0,
    "mamba_spec_blocks": lambda layout: 0,
    "hybrid": lambda layout: False,
    "host_tier": lambda layout: None,
}


def _always(layout: CacheLayout) -> bool:
    return True


@dataclass(frozen=True)
class Gate:
    """A shortcut's declaration: the layout fields it models and those it refuses."""

    name: str
    models: frozenset[str]
    refuses: frozenset[str]
    condition: Callable[[CacheLayout], bool] = _always  # over modelled fields only
    why: str = ""

    def admits(self, layout: CacheLayout) -> bool:
        """Whether the shortcut reproduces the reference for `layout`: every field it does
        not model (named in `refuses` or in neither list) holds its inert value, and its
        condition holds."""
        for name in LAYOUT_FIELDS:
            if name in self.models:
                continue
            inert = INERT.get(name)
            if inert is None or getattr(layout, name) != inert(layout):
                return False
        return self.condition(layout)


# Every field the layout has today, named one by one: a gate that models them all says so
# here, and a field added later is in no gate until one names it.
_ALL = frozenset(
    {
        "block_size",
        "hash_block_size",
        "fine",
        "alignment",
        "group_types",
        "sliding_window",
        "retention_interval",
        "max_num_batched_tokens",
        "num_blocks",
        "hash_lookahead",
        "eagle_drop",
        "alloc_lookahead",
        "mamba_spec_blocks",
        "hybrid",
    }
)
_SPEC = frozenset({"hash_lookahead", "eagle_drop", "alloc_lookahead", "mamba_spec_blocks"})
# The host KV tier: no shortcut models it (stores, loads and the wait run step by step in
# the reference and the concurrent replay; which decode steps those skip, each decides
# itself: host_replay.py, host_concurrent.py).
_HOST = frozenset({"host_tier"})
_FINE = frozenset({"hash_block_size", "fine", "alignment"})

CLOSED_FORM = Gate(
    "closed_form",
    models=frozenset(
        {"block_size", "group_types", "retention_interval", "max_num_batched_tokens", "hybrid"}
    ),
    refuses=frozenset({"sliding_window", "num_blocks"}) | _SPEC | _FINE | _HOST,
    why="compiled/fast.py UnboundedReplay: no eviction, full attention and Mamba states "
    "followed as hash sets; without a drafter one group or several behave alike",
)
SHARED_FORM = Gate(
    "shared_form",
    models=CLOSED_FORM.models,
    refuses=CLOSED_FORM.refuses,
    condition=lambda layout: layout.group_types == (FULL,),
    why="compiled/fast.py attention_columns: the closed form with full attention alone "
    "(retention then acts on nothing)",
)
DENSE = Gate(
    "dense",
    models=frozenset(
        {"block_size", "group_types", "num_blocks", "max_num_batched_tokens", "retention_interval"}
    ),
    refuses=frozenset({"sliding_window", "hybrid"}) | _SPEC | _FINE | _HOST,
    condition=lambda layout: layout.group_types == (FULL,) and layout.num_blocks is not None,
    why="compiled/dense.py DenseReplay: one full-attention group in a bounded pool "
    "(retention acts on no full-attention block)",
)
HYBRID = Gate(
    "hybrid",
    models=_ALL,
    refuses=_HOST,
    condition=lambda layout: FULL in layout.group_types,
    why="compiled/hybrid.py HybridReplay: every layout with full attention, field by field "
    "as the reference (its lookup is attention first)",
)
CAPACITY_CURVE = Gate(
    "capacity_curve",
    models=frozenset(
        {
            "block_size",
            "group_types",
            "num_blocks",
            "max_num_batched_tokens",
            "retention_interval",
            "hash_block_size",
            "alignment",
        }
    ),
    refuses=frozenset({"sliding_window", "hybrid", "fine"}) | _SPEC | _HOST,
    condition=lambda layout: layout.group_types == (FULL,),
    why="compiled/stack_distance.py capacity_curve: one LRU full-attention group, every "
    "pool size at once (a budget only splits prefills; a whole-block match compares the "
    "same prefixes whatever the match unit; CapacityCurve.valid checks each num_blocks)",
)
DECODE_EVENTS = Gate(
    "decode_events",
    models=_ALL,
    refuses=_HOST,
    why="layout.decode_events: the positions where a decode step can change the cache, "
    "which the reference's and the concurrent replay's sleeping decoders and the hybrid "
    "loop skip between; an unmodelled field makes every position one",
)
# The fast paths of a serial replay, in the order the engine tries them.
SERIAL_PATHS = (CLOSED_FORM, DENSE, HYBRID)
GATES = (CLOSED_FORM, SHARED_FORM, DENSE, HYBRID, CAPACITY_CURVE, DECODE_EVENTS)


def events(layout: CacheLayout) -> tuple[int, ...]:
    """`layout.decode_events` where its gate admits the layout, else every position in a
    block (nothing is skipped)."""
    if DECODE_EVENTS.admits(layout):
        return decode_events(layout)
    return tuple(range(layout.block_size))


# -- policy keys -----------------------------------------------------------------------


def vllm_keys() -> tuple[str, ...]:
    """Every policy key a vLLM policy can set: the base keys and vLLM's engine options."""
    return BASE_KEYS + tuple(k for k, o in OPTIONS.items() if o.engine == "vllm")


_DEFAULTS = {f.name: f.default for f in fields(Policy)}


def unmodelled_keys(policy: Policy) -> tuple[str, ...]:
    """The policy keys set away from their default that neither the layout carries nor are
    declared outside a cache's serial replay: where any is, no shortcut runs."""
    out = []
    for key in BASE_KEYS:
        if key in LAYOUT_KEYS or key in OUTSIDE_CACHE_KEYS:
            continue
        if getattr(policy, key) != _DEFAULTS[key]:
            out.append(key)
    for key, value in policy.options:
        if key in LAYOUT_KEYS or key in OUTSIDE_CACHE_KEYS:
            continue
        if value != OPTIONS[key].default:
            out.append(key)
    return tuple(out)


# -- the declarations' completeness (tests/sim/vllm/test_gates.py) --------------------------


def undecided(gates=GATES, layout_fields=LAYOUT_FIELDS) -> list[str]:
    """`gate: field` for each layout field a gate neither models nor refuses, or names in
    both lists, and each refused field without an inert value: what a new field forces."""
    out = []
    for gate in gates:
        for name in layout_fields:
            if (name in gate.models) == (name in gate.refuses):
                out.append(f"{gate.name}: {name}")
            elif name in gate.refuses and name not in INERT:
                out.append(f"{gate.name}: {name} (refused, but has no inert value)")
        out += [f"{gate.name}: {n} (no such field)" for n in gate.models | gate.refuses
                if n not in layout_fields]  # fmt: skip
    return out


def undeclared_keys(keys=None) -> list[str]:
    """The vLLM policy keys in neither or both of `LAYOUT_KEYS` and `OUTSIDE_CACHE_KEYS`."""
    keys = vllm_keys() if keys is None else keys
    return [k for k in keys if (k in LAYOUT_KEYS) == (k in OUTSIDE_CACHE_KEYS)]
