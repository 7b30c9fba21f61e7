"""The compiled bounded full-attention replay (sim/vllm/compiled/dense.py) against the block-level
replay in Python, request by request: hits, chunks and errors, on random traces and pools
small enough to evict, refuse and stop mid-request; and which layouts it takes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.sim.common.block_hash import HashInterner, request_hashes
from analyzer.sim.common.block_ids import CompiledBlockIds, LookaheadIds
from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import VllmReplay
from analyzer.sim.vllm.compiled import dense as dense_module
from analyzer.sim.vllm.compiled import fast_replay
from analyzer.sim.vllm.compiled.compiled_input import _laid_out
from analyzer.sim.vllm.compiled.dense import DenseReplay, dense_applies
from analyzer.sim.vllm.layout import make_layout
from analyzer.sim.vllm.reference import NOT_SCHEDULABLE
from tests.sim.strategies import traces

MANY = settings(max_examples=400, deadline=None)


@st.composite
def dense_policies(draw):
    values = {
        "groups": ["full_attention"],
        "block_size": draw(st.sampled_from([1, 2, 3, 4, 8])),
        "num_blocks": draw(st.integers(2, 40)),
        "retention_interval": draw(st.sampled_from([0, None])),
    }
    if draw(st.booleans()):
        values["max_num_batched_tokens"] = draw(st.integers(1, 24))
    return make_policy(values)


def _both(requests: list[SimRequest], policy) -> tuple[list, list]:
    compiled = fast_replay(make_layout(policy, None), NOT_SCHEDULABLE)
    assert isinstance(compiled, DenseReplay)
    return list(compiled.run(requests)), list(VllmReplay(policy).run(requests))


@MANY
@given(traces(max_requests=16, max_len=30), dense_policies(), st.integers(1, 5))
def test_equals_the_block_level_replay(requests, policy, step):
    """Every field of every result, whatever the requests handed to the loop at once."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(dense_module, "STEP_REQUESTS", step)
        got, want = _both(requests, policy)
    assert got == want


CASES = [  # (name, block, num_blocks, budget, prompts (token lists), outputs per request)
    ("hit then evicted", 2, 4, None, [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [7, 7, 7, 7, 7]], 0),
    ("a resend keeps a duplicate", 2, 8, None, [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]], 0),
    ("too big to admit", 2, 3, None, [[1, 2, 3, 4, 5, 6, 7]], 0),
    ("stops in prefill", 2, 4, 2, [[1, 2, 3, 4, 5, 6, 7, 8, 9]], 0),
    ("stops in decode", 2, 3, None, [[1, 2, 3]], 6),
    ("decode fills blocks", 3, 20, 4, [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 9, 9, 9, 9]], 5),
    ("empty prompt", 2, 4, None, [[], [1, 2, 3]], 0),
]


@pytest.mark.parametrize(
    "block, num_blocks, budget, prompts, outputs", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_cases(block, num_blocks, budget, prompts, outputs):
    values = {"groups": ["full_attention"], "block_size": block, "num_blocks": num_blocks}
    if budget:
        values["max_num_batched_tokens"] = budget
    requests = [SimRequest(f"r{i}", p, None, outputs) for i, p in enumerate(prompts)]
    got, want = _both(requests, make_policy(values))
    assert got == want


@pytest.mark.parametrize(
    "values, applies",
    [
        ({"groups": ["full_attention"], "block_size": 16, "num_blocks": 100}, True),
        ({"groups": ["full_attention"], "block_size": 16}, False),  # unbounded: closed form
        ({"groups": ["full_attention", "mamba"], "block_size": 16, "num_blocks": 100}, False),
        (
            {"groups": ["full_attention"], "block_size": 16, "num_blocks": 100}
            | {"spec_decode": "eagle_lookahead"},
            False,
        ),
    ],
)
def test_the_layouts_it_replays(values, applies):
    assert dense_applies(make_layout(make_policy(values))) is applies


def test_hash_id_requests_beside_token_ids():
    """Hash-id requests are hashed as the replay hashes them, token-id ones by the compiled
    interner, from one id counter: neither kind matches the other, each matches its own."""
    hashed = [
        SimRequest("h0", block_hash_ids=[1, 2, 3], trace_block_size=2, prompt_tokens=6),
        SimRequest("t0", [1, 2, 3, 4, 5, 6]),
        SimRequest("h1", block_hash_ids=[1, 2, 9], trace_block_size=2, prompt_tokens=5),
        SimRequest("t1", [1, 2, 3, 4, 5, 6, 7], None, 3),
        SimRequest("h2", block_hash_ids=[1, 2, 3, 4], trace_block_size=2, output_tokens=2),
    ]
    for num_blocks in (3, 6, 40):
        policy = make_policy(
            {"groups": ["full_attention"], "block_size": 2, "num_blocks": num_blocks}
        )
        got, want = _both(hashed, policy)
        assert got == want


@MANY
@given(traces(max_requests=12, max_len=30), st.sampled_from([1, 2, 3, 4]), st.integers(0, 2))
def test_compiled_block_ids_are_the_interners(requests, block, lookahead):
    """Two blocks get one id exactly when the interpreter's interner gives them one (a
    block with its `lookahead` tokens, as EAGLE hashes them)."""
    interner, compiled = HashInterner(ahead=True), HashInterner(ahead=True)
    ids = CompiledBlockIds(compiled, block)
    want, tokens, starts, known, roots, at = [], [], [], [], [], 0
    for r in requests:
        seq = list(r.prompt_token_ids) + list(r.output_token_ids or [])
        count = (len(seq) + r.num_output_tokens * (r.output_token_ids is None)) // block
        want += request_hashes(interner, r, block, lookahead)[0].extend(count)[:count]
        tokens += seq
        starts.append(at)
        known.append(len(seq) // block)
        roots.append(compiled.root(r.namespace))
        at += len(seq)
    total = [
        (r.num_prompt_tokens + r.num_output_tokens) // block for r in requests
    ]  # the same counts, as the replay asks
    tokens, starts = np.asarray(tokens, np.int32), np.asarray(starts)
    got, offsets = ids.ids(tokens, starts, np.asarray(known), np.asarray(total), np.asarray(roots))
    if lookahead:  # from the plain ids, as the replay does
        lens = [len(r.prompt_token_ids) + len(r.output_token_ids or []) for r in requests]
        known = np.maximum(np.asarray(lens) - lookahead, 0) // block
        got = LookaheadIds(compiled, block, lookahead).ids(got, offsets, tokens, starts, known)
    assert len(got) == len(want)
    pairs = {(a, b) for a, b in zip(got.tolist(), want, strict=True)}
    assert len({a for a, _ in pairs}) == len({b for _, b in pairs}) == len(pairs)


@MANY
@given(traces(max_requests=12, max_len=30), dense_policies(), st.booleans())
def test_views_of_one_held_array_read_in_place(requests, policy, adjacent):
    """Prompts (and outputs) viewing one int32 array, as a loaded trace holds them, are
    read where they are (outputs right after their prompts) or copied (elsewhere): the
    results are the same."""
    pieces, places = [], []
    for r in requests:
        out = [] if r.output_token_ids is None else list(r.output_token_ids)
        places.append((sum(map(len, pieces)), len(r.prompt_token_ids), len(out)))
        pieces += [list(r.prompt_token_ids), out if adjacent else [], [9]]
    tail = sum(map(len, pieces))
    flat = np.asarray([t for p in pieces for t in p] + [t for r in requests if not adjacent
                      for t in (r.output_token_ids or [])], np.int32)  # fmt: skip
    held, at_tail = [], tail
    for r, (at, n, m) in zip(requests, places, strict=True):
        if r.output_token_ids is None:
            out = None
        elif adjacent:
            out = flat[at + n : at + n + m]
        else:
            out, at_tail = flat[at_tail : at_tail + m], at_tail + m
        held.append(replace(r, prompt_token_ids=flat[at : at + n], output_token_ids=out))
    got, want = _both(held, policy)
    assert got == want and want == _both(requests, policy)[1]


_FLAT = np.arange(20, dtype=np.int32)
_LAYOUTS = {
    # name: ((prompt, outputs) per row, where each prompt starts in _FLAT or None: copied)
    "prompts in order": ([(_FLAT[0:3], None), (_FLAT[3:8], None)], [0, 3]),
    "outputs right after": ([(_FLAT[2:4], _FLAT[4:6]), (_FLAT[9:10], _FLAT[10:13])], [2, 9]),
    "rows out of order": ([(_FLAT[10:12], None), (_FLAT[0:4], None)], [10, 0]),
    "one-token views": ([(_FLAT[5:6], _FLAT[6:7]), (_FLAT[0:1], None)], [5, 0]),
    "output elsewhere": ([(_FLAT[0:3], _FLAT[5:7])], None),
    "reversed view": ([(_FLAT[6:2:-1], None)], None),
    "strided view": ([(_FLAT[0:8:2], None)], None),
    "another array": ([(_FLAT[0:3], None), (_FLAT.copy()[3:5], None)], None),
    "int64 prompt": ([(np.arange(4)[0:2], None)], None),
    "lists": ([([1, 2, 3], [4])], None),
}


@pytest.mark.parametrize("name", list(_LAYOUTS))
def test_laid_out_reads_held_views_in_place(name):
    """Prompts viewing one int32 array, each output right after its prompt, are read where
    they are (starts in that array); any other layout is copied into one run per row."""
    seqs, starts = _LAYOUTS[name]
    tokens, got_starts, lens = _laid_out(seqs)
    if starts is None:
        assert tokens.base is not _FLAT
        assert got_starts.tolist() == np.cumsum([0, *lens.tolist()])[:-1].tolist()
    else:
        assert tokens is _FLAT and got_starts.tolist() == starts
    for (p, o), at, n in zip(seqs, got_starts.tolist(), lens.tolist(), strict=True):
        assert tokens[at : at + n].tolist() == list(p) + list([] if o is None else o)
