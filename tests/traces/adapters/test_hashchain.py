"""hashchain.chained's fast paths (a prefix shared with an earlier list, a memo, C-speed
checks) against the plain chain: one blake2b of (previous id, local id) an id, each id
checked one by one. Equal outputs, and the same lists passed through unchanged."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.traces.adapters import hashchain
from analyzer.traces.records import INT64_MAX, INT64_MIN, Int64Ids

START = hashchain.seed("test")


def plain_chain(start: int, local, *_):
    """The chain as first written: every id checked, then hashed after the one before."""
    if not isinstance(local, list) or not all(
        type(h) is int and INT64_MIN <= h <= INT64_MAX for h in local
    ):
        return local
    ids, prev = [], start
    for h in local:
        prev = hashchain.int64(
            prev.to_bytes(8, "little", signed=True) + h.to_bytes(8, "little", signed=True)
        )
        ids.append(prev)
    return ids


# Few distinct small ids, so that lists share prefixes and memo keys; and the int64 edges.
local_ids = st.integers(0, 6) | st.sampled_from([INT64_MIN, INT64_MAX, -1])
# What is no int64: equal to an int (True, 1.0) or not, past 64 bits, not a number.
not_ids = (
    st.sampled_from([True, False, 1.0, 0.0, 2.5, "1", None, [1]])
    | st.integers(INT64_MAX + 1, 2**70)
    | st.integers(-(2**70), INT64_MIN - 1)
)


@st.composite
def conversations(draw) -> list:
    """Id lists as a conversation sends them: each one some earlier list's prefix (any
    length) and ids of its own, now and then one element that is no int64."""
    lists: list = []
    for _ in range(draw(st.integers(1, 8))):
        base = draw(st.sampled_from(lists)) if lists and draw(st.booleans()) else []
        base = base if isinstance(base, list) else []
        local = base[: draw(st.integers(0, len(base)))] + draw(st.lists(local_ids, max_size=40))
        if local and draw(st.integers(0, 3)) == 0:
            local[draw(st.integers(0, len(local) - 1))] = draw(not_ids)
        lists.append(draw(st.sampled_from(["not a list", 7, None])) if not local else local)
    return lists


@settings(max_examples=400)
@given(conversations(), st.booleans(), st.booleans())
def test_chained_is_the_plain_chain(lists, with_memo, any_previous):
    memo: hashchain.Memo | None = {} if with_memo else None
    done: list[hashchain.Chain] = []
    for i, local in enumerate(lists):
        previous = done[i % len(done)] if done and any_previous else (done[-1] if done else None)
        got = hashchain.chained(START, local, memo, previous)
        want = plain_chain(START, local)
        assert got == want
        if want is local:
            assert got is local  # passed through for validate_record to reject
        else:
            assert type(got) is Int64Ids and all(type(h) is int for h in got)
            done.append((local, got))


@given(st.lists(local_ids, max_size=200), st.lists(local_ids, max_size=80), st.data())
def test_shared_prefix_is_the_first_difference(common, tail, data):
    other = common + data.draw(st.lists(local_ids, max_size=80))
    one = common + tail
    want = next(
        (k for k, (a, b) in enumerate(zip(one, other, strict=False)) if a != b),
        min(len(one), len(other)),
    )
    assert hashchain.shared_prefix(one, other) == want == hashchain.shared_prefix(other, one)


def test_a_float_or_bool_equal_to_the_previous_id_is_no_id():
    first = [1, 0, 5] * 20
    previous = (first, hashchain.chained(START, first, {}))
    for bad in (1.0, True):
        local = [*first[:30], bad, *first[31:]]
        assert hashchain.chained(START, local, {}, previous) is local
    past = [*first, 2**63]  # past the shared prefix, which alone is not checked again
    assert hashchain.chained(START, past, {}, previous) is past
