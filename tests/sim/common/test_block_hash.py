"""Block hash ids (sim/common/block_hash.py) against the simplest oracle: two blocks get the same
id exactly when the token prefixes they end (with their lookahead) are equal."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.sim.common.block_hash import HashInterner, request_hashes
from analyzer.sim.records import SimRequest


def _prefix_key(tokens: list[int], i: int, block: int, look: int, namespace) -> tuple:
    return (namespace, tuple(tokens[: (i + 1) * block + look]))


@st.composite
def _families(draw):
    """Prompts that share prefixes of random lengths (cut anywhere, not only on blocks), over a
    tiny vocabulary so equal blocks after different prefixes are common too."""
    vocab = draw(st.integers(2, 4))
    tokens = st.lists(st.integers(0, vocab - 1), min_size=0, max_size=40)
    prompts = [draw(tokens.filter(bool))]
    for _ in range(draw(st.integers(1, 12))):
        parent = prompts[draw(st.integers(0, len(prompts) - 1))]
        cut = draw(st.integers(0, len(parent)))
        prompts.append(parent[:cut] + draw(tokens))
    return [p for p in prompts if p]


@settings(max_examples=300, deadline=None)
@given(
    _families(),
    st.integers(1, 4),
    st.integers(0, 2),
    st.lists(st.integers(1, 12), min_size=1, max_size=4),
    st.booleans(),
)
def test_ids_equal_exactly_when_prefixes_equal(prompts, block, look, steps, salted):
    interner = HashInterner()
    seen: dict[tuple, int] = {}
    owners: dict[int, tuple] = {}
    for k, prompt in enumerate(prompts):
        namespace = ("salt" if k % 3 == 0 else None) if salted else None
        source, _ = request_hashes(
            interner, SimRequest(f"r{k}", np.asarray(prompt), namespace=namespace), block, look
        )
        ids: list[int] = []
        for count in np.cumsum(steps):  # extended in pieces, as decode does
            ids = source.extend(int(count))
        known = (len(prompt) - look) // block
        for i, block_id in enumerate(ids):
            if i >= known:  # tokens nobody else has: an id of its own
                assert block_id not in owners
                owners[block_id] = ("fresh", k, i)
                continue
            key = _prefix_key(prompt, i, block, look, namespace)
            assert seen.setdefault(key, block_id) == block_id, "one prefix, two ids"
            assert owners.setdefault(block_id, key) == key, "one id, two prefixes"


def test_a_run_is_followed_then_left_where_the_bytes_differ():
    """The module docstring's example: a shared prefix is found through the first chain's run,
    a branch gets a run of its own, and a branch of the branch an edge into it."""
    interner = HashInterner()
    a = request_hashes(interner, SimRequest("a", [1, 1, 2, 2, 3, 3, 4, 4]), 2, 0)[0].extend(4)
    b = request_hashes(interner, SimRequest("b", [1, 1, 2, 2, 5, 5, 6, 6]), 2, 0)[0].extend(4)
    c = request_hashes(interner, SimRequest("c", [1, 1, 2, 2, 5, 5, 4, 4]), 2, 0)[0].extend(4)
    assert a[:2] == b[:2] == c[:2] and a[2] != b[2]
    assert c[2] == b[2] and c[3] not in (a[3], b[3])
    assert a == list(range(a[0], a[0] + 4))  # one run: consecutive ids
    assert len(interner.ids) == 3  # an edge per run: (root, [1 1]), (a1, [5 5]), (b2, [4 4])
