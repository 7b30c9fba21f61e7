"""The vLLM engine's shortcuts say what they model (analyzer/sim/vllm/gates.py, issue 51 item 5).

Every gate names each layout field as modelled or refused, every vLLM policy key is carried by
the layout or declared outside a cache's replay, and a field or key a gate does not know
turns the shortcut off. The golden cases take the paths they took before the gates were
declared (the table below was computed with the former `*_applies` functions).
"""

from __future__ import annotations

import ast
import inspect
import json
from dataclasses import replace
from pathlib import Path

import pytest

from analyzer.pipeline.one_pass import one_pass_applies
from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import gates, layout, replay, replay_from_shared, replay_path
from analyzer.sim.vllm.gates import (
    CAPACITY_CURVE,
    CLOSED_FORM,
    DECODE_EVENTS,
    DENSE,
    GATES,
    INERT,
    LAYOUT_FIELDS,
    SHARED_FORM,
    undecided,
    undeclared_keys,
    unmodelled_keys,
)
from analyzer.sim.vllm.host_tier import host_tier_spec
from analyzer.sim.vllm.layout import LAYOUT_KEYS, make_layout
from tests.sim.vllm.test_oracle_golden import CASES, _num_groups

GOLDEN = Path(__file__).resolve().parents[2] / "golden"


def test_every_gate_decides_every_layout_field():
    assert undecided() == []


def test_a_new_layout_field_forces_a_decision_in_every_gate():
    found = undecided(layout_fields=(*LAYOUT_FIELDS, "host_tier_gib"))
    assert found == [f"{gate.name}: host_tier_gib" for gate in GATES]


def test_a_refused_field_needs_an_inert_value():
    gate = replace(CLOSED_FORM, refuses=CLOSED_FORM.refuses | {"block_size"},
                   models=CLOSED_FORM.models - {"block_size"})  # fmt: skip
    assert undecided((gate,)) == ["closed_form: block_size (refused, but has no inert value)"]


def test_every_vllm_policy_key_is_carried_or_declared_outside():
    assert undeclared_keys() == []
    assert undeclared_keys((*gates.vllm_keys(), "vllm_host_tier_gib")) == ["vllm_host_tier_gib"]


def _policy_reads(function) -> set[str]:
    """The policy keys `function` reads: a field of the policy (policy.block_size), and
    `policy.option("KEY")` for an engine option."""
    tree = ast.parse(inspect.getsource(function))
    reads = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_policy(node.func) and node.func.attr == "option":
            reads.add(node.args[0].value)
        elif _is_policy(node) and node.attr != "option":
            reads.add(node.attr)
    return reads


def _is_policy(node) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "policy"
    )


def test_layout_keys_are_what_make_layout_reads():
    reads = set().union(
        *map(_policy_reads, (layout.make_layout, layout._group_counts, host_tier_spec))
    )
    properties = {"hash_block_tokens": {"prefix_match_unit", "block_size"}}
    keys = set().union(*(properties.get(name, {name}) for name in reads))
    assert keys == set(LAYOUT_KEYS)


def test_every_gate_refuses_a_host_tier():
    base = make_layout(make_policy({**TREE64, "num_blocks": 20}))
    tier = make_layout(make_policy({**TREE64, "num_blocks": 20, "host_tier_chunks": 8}))
    assert tier.host_tier is not None and base.host_tier is None
    assert [g.name for g in GATES if g.admits(base)] == [
        "dense", "hybrid", "capacity_curve", "decode_events"
    ]  # fmt: skip
    assert [g.name for g in GATES if g.admits(tier)] == []
    assert gates.events(tier) == tuple(range(64))  # every decode step runs
    policy = make_policy({**TREE64, "host_tier_chunks": 8})
    assert replay_path(policy) == "host_tier" and replay_from_shared(policy) is None


# -- runtime: a field or key outside the allow-list turns the shortcut off ----------------

TREE64 = {"groups": ["full_attention"], "block_size": 64, "max_num_batched_tokens": None}


@pytest.mark.parametrize(
    ("gate", "values", "field", "value"),
    [
        (CLOSED_FORM, TREE64, "num_blocks", 20),
        (CLOSED_FORM, TREE64, "hash_lookahead", 1),
        (SHARED_FORM, TREE64, "sliding_window", 100),
        (DENSE, {**TREE64, "num_blocks": 20}, "alloc_lookahead", 1),
        (DENSE, {**TREE64, "num_blocks": 20}, "hybrid", True),
        (CAPACITY_CURVE, {**TREE64, "num_blocks": 20}, "eagle_drop", True),
        (CAPACITY_CURVE, {**TREE64, "num_blocks": 20}, "fine", True),
    ],
)
def test_a_refused_field_away_from_inert_closes_the_gate(gate, values, field, value):
    base = make_layout(make_policy(values))
    assert gate.admits(base)
    assert not gate.admits(replace(base, **{field: value}))


@pytest.mark.parametrize("gate", GATES, ids=lambda g: g.name)
def test_an_unknown_field_closes_every_gate(gate, monkeypatch):
    base = make_layout(make_policy({**TREE64, "num_blocks": 20, "groups": ["full_attention"]}))
    if gate is CLOSED_FORM or gate is SHARED_FORM:
        base = replace(base, num_blocks=None)
    assert gate.admits(base)

    class WithTier:  # the layout as it would be with one more field
        def __getattr__(self, name):
            return 8 if name == "host_tier_gib" else getattr(base, name)

    monkeypatch.setattr(gates, "LAYOUT_FIELDS", (*LAYOUT_FIELDS, "host_tier_gib"))
    assert not gate.admits(WithTier())  # no inert value declared: refused at any value
    monkeypatch.setitem(INERT, "host_tier_gib", lambda layout: 8)
    assert gate.admits(WithTier())  # at its inert value: as before


def test_an_unknown_field_makes_every_decode_position_an_event(monkeypatch):
    base = make_layout(make_policy(TREE64))
    assert gates.events(base) == (0, 63)
    monkeypatch.setattr(gates, "LAYOUT_FIELDS", (*LAYOUT_FIELDS, "host_tier_gib"))
    assert gates.events(base) == tuple(range(64))  # base has no such field: refused


def _tree64() -> list[SimRequest]:
    rows = (GOLDEN / "oracle" / "tree64.trace.jsonl").read_text().splitlines()
    out = []
    for line in rows:
        rec = json.loads(line)
        out.append(SimRequest(str(rec["request_id"]), rec["prompt_token_ids"], [0]))
    return out


def test_an_undeclared_policy_key_sends_the_replay_to_the_reference(monkeypatch):
    policy = make_policy({**TREE64, "cache_scope": "shared"})
    fast = list(replay(_tree64(), policy))
    assert (replay_path(policy), unmodelled_keys(policy)) == ("closed_form", ())
    assert replay_from_shared(policy) is not None and one_pass_applies(policy)
    monkeypatch.setattr(gates, "OUTSIDE_CACHE_KEYS", gates.OUTSIDE_CACHE_KEYS - {"cache_scope"})
    assert (replay_path(policy), unmodelled_keys(policy)) == ("reference", ("cache_scope",))
    assert replay_from_shared(policy) is None and not one_pass_applies(policy)
    assert list(replay(_tree64(), policy)) == fast


# -- the golden cases take the paths they took before --------------------------------------

HYBRID_CASES = {
    f"{trace}_{case}"
    for trace, cases in {
        "chat64_b64": "combined eagle_drop eagle_lookahead unit16",
        "tree64_b64": "blocks12 blocks20 blocks20_retnull combined eagle_drop eagle_lookahead "
        "fa_swa100 swa100 unit16 unit16_retnull",
        "tree544_b544": "blocks10 blocks10_retnull blocks7 combined eagle_drop "
        "eagle_lookahead fa_swa1024 swa1024 unit32 unit32_retnull",
    }.items()
    for case in cases.split()
}
SHARED_CASES = {"chat64_b64_fa_only", "tree64_b64_fa_only", "tree544_b544_fa_only"}


@pytest.mark.skipif(not CASES, reason="no golden files in tests/golden/oracle")
@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_case_takes_its_fast_path(name):
    policy = make_policy(CASES[name]["policy"])
    groups = _num_groups(CASES[name].get("oracle_args", []), policy.groups) or None
    want = "hybrid" if name in HYBRID_CASES else "closed_form"
    assert replay_path(policy, num_groups=groups) == want
    assert (replay_from_shared(policy, num_groups=groups) is not None) is (name in SHARED_CASES)
    assert one_pass_applies(policy) is (name in SHARED_CASES)
    assert DECODE_EVENTS.admits(make_layout(policy, groups))


def test_the_golden_tables_cover_the_cases():
    assert HYBRID_CASES | SHARED_CASES <= set(CASES)
    assert len(HYBRID_CASES) == 24


def test_concurrent_goldens_take_the_concurrent_replay():
    cases = json.loads((GOLDEN / "oracle_concurrent" / "cases.json").read_text())
    for case in cases.get("cases", cases).values():
        policy = make_policy(case["policy"])
        assert replay_path(policy) == "concurrent"
        assert DECODE_EVENTS.admits(make_layout(policy))


def test_a_bounded_full_attention_pool_takes_the_dense_loop():
    assert replay_path(make_policy({**TREE64, "num_blocks": 20})) == "dense"
    assert replay_path(make_policy({**TREE64, "num_blocks": 20, "spec_decode": "eagle_drop"})) == (
        "hybrid"
    )
