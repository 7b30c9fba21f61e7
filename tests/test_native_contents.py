"""The C loops check what they are given, at the boundary (analyzer/native.h): each wrong
content of an argument is a ValueError naming it and its first bad position, raised before the
loop runs (the radix trees that earlier calls left: as the walk takes each edge); never a read
or write out of bounds (issue 48: a start past `flat` corrupted the heap, a short `flat` was
read past silently). `make asan` runs these under AddressSanitizer and UBSan, where an access
out of bounds aborts the process instead of passing."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

from analyzer.prefixes import radix
from analyzer.prefixes.memory import MemorySource, Request
from analyzer.traces import token_scan

radix_loop = radix.radix_loop
REQUESTS = [Request("a", prompt=(1, 2, 3, 4)), Request("b", prompt=(1, 2, 5))]
LAST = Request("c", prompt=(1, 2, 3, 9))  # fed alone, after the trees hold a and b
# feed's arguments by position (RadixMatch.feed passes them so)
FLAT, STARTS, LENS, QLEN, NS, HI, BASE, T_NODE, T_CHILD, COUNTS, ARENA, STORE = (
    0, 1, 4, 5, 6, 8, 9, 11, 13, 14, 15, 16,
)  # fmt: skip


def _feed_args(match: radix.RadixMatch, flat: np.ndarray, starts: list[int], first: int):
    store = match.arena if match.own else match.arena[:0].copy()
    return [flat, np.array(starts, np.int64), first, match.n, match.lens, match.qlen, match.ns,
            *match.nodes, *match.table, match.counts, match.arena, store, match.own, *match.out,
            match.leaf_at]  # fmt: skip


def _streamed():
    """Trees that hold a and b, fed as a stream (they own their arena), and the arguments
    that feed them c; the last chunk's flat holds c alone."""
    held = MemorySource.from_requests([*REQUESTS, LAST])
    match = radix.RadixMatch(held.meta, np.dtype(np.int64))
    match.feed(held.flat[:7].copy(), [0, 4], 0, 2)
    return match, _feed_args(match, held.flat[7:].copy(), [0], 2)


def _root_slot(args) -> int:
    """The table slot of the root's one child (the split a, b and c share)."""
    return int(np.flatnonzero(args[T_NODE][0] == 0)[0])


def _set(index: int, at, value) -> Callable[[list], None]:
    def mutate(args: list) -> None:
        args[index][at] = value

    return mutate


def _replace(index: int, make: Callable[[list], np.ndarray]) -> Callable[[list], None]:
    def mutate(args: list) -> None:
        args[index] = make(args)

    return mutate


def _foster(child: int) -> Callable[[list], str]:
    def mutate(args: list) -> str:
        slot = _root_slot(args)
        args[T_CHILD][0, slot] = child
        return f"feed: t_child[0, {slot}] = {child}: not a node in use (4 nodes in use)"

    return mutate


def _fill(args: list) -> str:
    """Every free slot taken by a copy of the root's entry: c's split has nowhere to go."""
    root, free = _root_slot(args), np.flatnonzero(args[T_NODE][0] < 0)
    for k in (T_NODE, T_NODE + 1, T_CHILD):
        args[k][0, free] = args[k][0, root]
    return "feed: t_node[0]: no free slot (16 slots)"


# name -> (what is wrong, the exact error): feed's arguments, checked in one pass before its
# loop runs. The trees hold 1 root, a's leaf (node 1: units [2, 4) from base 0), the split
# both share (node 2: [0, 2)) and b's leaf (node 3); 8 nodes, an arena of 11 units with 5 in
# use; c is 4 units, request 2.
FEED = {
    "a start past flat (the heap corrupted)": (
        _set(STARTS, 0, 1 << 40),
        "feed: starts[0] = 1099511627776: request 2's 4 units from there run outside flat "
        "(4 units)",
    ),
    "a flat one unit short (read past)": (
        _replace(FLAT, lambda a: a[FLAT][:3].copy()),
        "feed: starts[0] = 0: request 2's 4 units from there run outside flat (3 units)",
    ),
    "a negative start": (
        _set(STARTS, 0, -1),
        "feed: starts[0] = -1: request 2's 4 units from there run outside flat (4 units)",
    ),
    "a negative length": (_set(LENS, 2, -1), "feed: lens[2] = -1: negative"),
    "a query past its request": (
        _set(QLEN, 2, 5),
        "feed: qlen[2] = 5: not a length inside the request's 4 units",
    ),
    "a negative query": (
        _set(QLEN, 2, -1),
        "feed: qlen[2] = -1: not a length inside the request's 4 units",
    ),
    "a root not in use": (
        _set(NS, (0, 2), 4),
        "feed: ns[0, 2] = 4: not a root in use (4 nodes in use)",
    ),
    "a leaf given as a root": (
        _set(NS, (0, 2), 1),
        "feed: ns[0, 2] = 1: not a root in use (4 nodes in use)",
    ),
    "nodes in use past the arrays": (
        _set(COUNTS, 0, 7),
        "feed: counts[0] = 7: not a count of nodes in use that leaves the 2 each of 1 "
        "request(s) may add (8 nodes)",
    ),
    "a negative count of nodes": (
        _set(COUNTS, 0, -1),
        "feed: counts[0] = -1: not a count of nodes in use that leaves the 2 each of 1 "
        "request(s) may add (8 nodes)",
    ),
    "arena units past the arena": (
        _set(COUNTS, 1, 12),
        "feed: counts[1] = 12: not a count of arena units in use (11 units)",
    ),
    "an arena too full for the request": (
        _set(COUNTS, 1, 9),
        "feed: lens[2] = 4: past the 2 units the arena has left for requests 2 on",
    ),
    "a store that is not the arena": (
        _replace(STORE, lambda a: a[ARENA].copy()),
        "feed: store: the arena itself is needed (own)",
    ),
}


@pytest.mark.parametrize("name", list(FEED))
def test_feed_refuses_wrong_arguments_before_its_loop_runs(name):
    mutate, error = FEED[name]
    match, args = _streamed()
    mutate(args)
    before = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    with pytest.raises(ValueError) as caught:
        radix_loop.feed(*args)
    assert str(caught.value) == error
    for was, now in zip(before, args, strict=True):  # nothing written: the loop never ran
        assert np.array_equal(was, now)


# The trees as earlier calls left them, checked edge by edge as c's walk takes one (root ->
# node 2 at depth 0 -> node 1 at depth 2): what is wrong -> the exact error (a callable
# says it, where it depends on a slot).
TREES = {
    "an edge past the arena": (
        _set(HI, (0, 1), 12),
        "feed: hi, base[0, 1] = 12, 0: not an edge from depth 2 inside the arena (11 units)",
    ),
    "an edge before the arena": (
        _set(BASE, (0, 1), -3),
        "feed: hi, base[0, 1] = 4, -3: not an edge from depth 2 inside the arena (11 units)",
    ),
    "an edge that ends where the walk is": (
        _set(HI, (0, 1), 2),
        "feed: hi, base[0, 1] = 2, 0: not an edge from depth 2 inside the arena (11 units)",
    ),
    "a child not in use": (_foster(6), None),
    "a child below the nodes": (_foster(-2), None),
    "a table with no free slot": (_fill, None),
}


@pytest.mark.parametrize("name", list(TREES))
def test_feed_refuses_trees_it_cannot_walk(name):
    mutate, error = TREES[name]
    match, args = _streamed()
    said = mutate(args)
    with pytest.raises(ValueError) as caught:
        radix_loop.feed(*args)
    assert str(caught.value) == (error or said)


def test_held_trees_point_into_the_held_array_itself():
    held = MemorySource.from_requests(REQUESTS)
    match = radix.RadixMatch(held.meta, np.dtype(np.int64), held=held.flat)
    args = _feed_args(match, held.flat.copy(), [0, 4], 0)
    with pytest.raises(ValueError, match=re.escape("feed: arena: flat itself is needed")):
        radix_loop.feed(*args)
    match.feed(held.flat, [0, 4], 0, 2)
    assert match.views()["any"][0].tolist() == [0, 2]


def test_the_checked_feed_gives_the_answers():
    match, args = _streamed()
    radix_loop.feed(*args)
    assert match.views()["any"][0].tolist() == [0, 2, 3]  # L: c shares 1, 2, 3 with a


def _rebuilt():
    """rebuild's arguments for c alone (its units [3, 4) in the arena, the rest a's)."""
    match, args = _streamed()
    radix_loop.feed(*args)
    seq = match.sequences()
    lens = np.asarray(seq.meta.insert_len, dtype=np.int64)
    out = np.zeros(4, np.int64)
    ids, starts = np.array([2], np.int64), np.array([0], np.int64)
    return [ids, lens, seq.e, seq.w, seq.leaf_at, seq.arena, out, starts]


REBUILD = {
    "an id past the requests": ((0, 0, 3), "rebuild: ids[0] = 3: not a request (3)"),
    "a negative id": ((0, 0, -1), "rebuild: ids[0] = -1: not a request (3)"),
    "a length past out": ((1, 2, 5), "rebuild: lens[2] = 5: not a length inside out (4 units)"),
    "a start past out": (
        (7, 0, 1),
        "rebuild: out_starts[0] = 1: request 2's 4 units from there run outside out (4 units)",
    ),
    "a depth below zero": (
        (2, 2, -1),
        "rebuild: e[2] = -1: not a depth (4 units of the request left)",
    ),  # fmt: skip
    "units past the arena": (
        (4, 2, 100),
        "rebuild: leaf_at[2] = 100: units [3, 4) of the request outside the arena",
    ),
    "a holder that is not earlier": (
        (3, 2, 2),
        "rebuild: w[2] = 2: not an earlier request, and 3 units are left",
    ),
}


@pytest.mark.parametrize("name", list(REBUILD))
def test_rebuild_refuses_wrong_contents(name):
    (index, at, value), error = REBUILD[name]
    args = _rebuilt()
    args[index] = args[index].copy()
    args[index][at] = value
    with pytest.raises(ValueError) as caught:
        radix_loop.rebuild(*args)
    assert str(caught.value) == error


def test_the_checked_rebuild_gives_the_sequence():
    args = _rebuilt()
    radix_loop.rebuild(*args)
    assert args[6].tolist() == [1, 2, 3, 9]


# -- the token scanner ------------------------------------------------------------------
BODY = b'{"prompt_token_ids": [5, 6]}\n' * 3


def _strip_args(body: bytes = BODY, num_lines: int = 3) -> list:
    buf = np.frombuffer(body, dtype=np.uint8)
    most = buf.size // 2 + 1
    return [buf, token_scan._KEYS, token_scan._KEY_STARTS.copy(), np.empty(buf.size, np.uint8),
            np.empty((2, most), np.int32), np.empty(most, np.int64), np.zeros(3, np.int64),
            np.full((3, num_lines), -1, np.int64)]  # fmt: skip


KEYS_SIZE = token_scan._KEYS.size  # 46 bytes: 16 + 16 + 14
STRIP = {
    "a key span before the last": (
        (2, 2, 10),
        "strip: key_starts[2] = 10: not an offset in keys (46 bytes) from 16 on",
    ),
    "a key span before keys": (
        (2, 0, -1),
        "strip: key_starts[0] = -1: not an offset in keys (46 bytes) from 0 on",
    ),
    "a key span past keys": (
        (2, 3, 47),
        "strip: key_starts[3] = 47: not an offset in keys (46 bytes) from 32 on",
    ),
    "values already counted": (
        (6, 0, 1 << 40),
        "strip: num_values[0] = 1099511627776: 0 needed (no value read yet)",
    ),
    "a negative count of values": (
        (6, 2, -3),
        "strip: num_values[2] = -3: 0 needed (no value read yet)",
    ),
}


@pytest.mark.parametrize("name", list(STRIP))
def test_strip_refuses_wrong_contents(name):
    (index, at, value), error = STRIP[name]
    args = _strip_args()
    args[index][at] = value
    with pytest.raises(ValueError) as caught:
        token_scan._compiled()(*args)
    assert str(caught.value) == error


@pytest.mark.parametrize(
    ("body", "num_lines", "error"),
    [
        (BODY, 2, "strip: count: 2 columns for the batch's 3 lines"),
        (BODY, 4, "strip: count: 4 columns for the batch's 3 lines"),
        (BODY[:-1], 2, "strip: count: 2 columns for the batch's 3 lines"),  # the last unended
        (b"\n", 0, "strip: count: 0 columns for the batch's 1 lines"),
    ],
    ids=["fewer", "more", "the last line unended", "a blank line"],
)
def test_strip_needs_a_count_column_per_line(body, num_lines, error):
    with pytest.raises(ValueError) as caught:
        token_scan._compiled()(*_strip_args(body, num_lines))
    assert str(caught.value) == error


def test_strip_refuses_no_keys():
    args = _strip_args()
    args[2] = np.zeros(0, np.int64)
    with pytest.raises(ValueError, match="^strip: arrays too small for the batch$"):
        token_scan._compiled()(*args)


def test_the_checked_strip_reads_every_line():
    args = _strip_args()
    assert token_scan._compiled()(*args) == len(BODY) - 3 * len("5, 6")
    assert args[7][0].tolist() == [2, 2, 2] and args[4][0, :6].tolist() == [5, 6] * 3
