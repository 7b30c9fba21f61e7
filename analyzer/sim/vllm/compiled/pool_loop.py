"""block_pool.BlockPool over arrays (loop_fields.py), for the compiled hybrid loop
(hybrid_loop.py). Every function here runs compiled (numba).

Each (block, key) pair is an entry: a block may carry several keys (its primary first, then
sub-block entries of prompt tails) and a key may be carried by several blocks (vLLM does
not de-duplicate; a lookup takes the oldest). An entry is in two lists: its key's holders
(`N_AFTER` and `N_BEFORE`, oldest first: a key a thousand blocks hold, when a prefix is
recomputed behind a missing Mamba state, takes one step to add or drop a holder) and its
block's keys (`N_SIB`); a free entry's `N_SIB` is the next free one.
"""

from __future__ import annotations

from analyzer.sim.vllm.compiled.loop_fields import (
    C_BOUNDED,
    C_G,
    C_TRACK_EVICTED,
    C_TYPES,
    EVICTED,
    FA,
    FIRST,
    HOLDER,
    N_AFTER,
    N_BEFORE,
    N_BLOCK,
    N_KEY,
    N_SHADOW,
    N_SIB,
    NEXT,
    PREV,
    REF,
    S_FREE,
    S_FRESH,
    S_NODE_FRESH,
    S_NODES,
    S_REMOVED,
    SHADOWS,
    TAIL,
    TOKENS,
)  # fmt: skip


def primary(b, pool, nodes):  # pragma: no cover - compiled
    """Block b's primary key, -1 none."""
    e = pool[FIRST, b]
    return nodes[N_KEY, e] if e >= 0 else -1


def holder(key, keys, nodes):  # pragma: no cover - compiled
    """The oldest block holding `key`, -1 none."""
    e = keys[HOLDER, key]
    return nodes[N_BLOCK, e] if e >= 0 else -1


def holds(key, b, pool, nodes):  # pragma: no cover - compiled
    e = pool[FIRST, b]
    while e >= 0:
        if nodes[N_KEY, e] == key:
            return True
        e = nodes[N_SIB, e]
    return False


def insert(key, b, tokens, shadow, state):  # pragma: no cover - compiled
    """Register `key` on block b (BlockPool.insert): its primary if it has none; with its
    plain `shadow` key (-1 none)."""
    pool, st, keys, nodes = state[0], state[1], state[2], state[6]
    last = pool[FIRST, b]
    if last >= 0:
        if nodes[N_KEY, last] == key:
            return
        while nodes[N_SIB, last] >= 0:
            last = nodes[N_SIB, last]
            if nodes[N_KEY, last] == key:
                return
    e = st[S_NODES]
    if e >= 0:
        st[S_NODES] = nodes[N_SIB, e]
    else:
        e = st[S_NODE_FRESH]
        if e >= nodes.shape[1]:  # hybrid.py sizes them per step: a bug, not a user's error
            raise AssertionError("hybrid replay: out of entries")
        st[S_NODE_FRESH] += 1
    if last < 0:
        pool[FIRST, b], pool[TOKENS, b] = e, tokens
    else:
        nodes[N_SIB, last] = e
    nodes[N_KEY, e], nodes[N_BLOCK, e], nodes[N_AFTER, e], nodes[N_SIB, e] = key, b, -1, -1
    nodes[N_SHADOW, e] = shadow
    if shadow >= 0:
        keys[SHADOWS, shadow] += 1
    last = keys[TAIL, key]  # the newest holder: e comes after it
    nodes[N_BEFORE, e] = last
    if last < 0:
        keys[HOLDER, key] = e
    else:
        nodes[N_AFTER, last] = e
    keys[TAIL, key] = e


def remove_hashes(b, cfg, state):  # pragma: no cover - compiled
    """Drop every key block b carries from its holders; True if it carried any."""
    pool, st, keys, nodes = state[0], state[1], state[2], state[6]
    e = pool[FIRST, b]
    if e < 0:
        return False
    while e >= 0:
        key = nodes[N_KEY, e]
        before, after = nodes[N_BEFORE, e], nodes[N_AFTER, e]
        if before < 0:
            keys[HOLDER, key] = after
        else:
            nodes[N_AFTER, before] = after
        if after < 0:
            keys[TAIL, key] = before
        else:
            nodes[N_BEFORE, after] = before
        if cfg[C_TYPES + key % cfg[C_G]] != FA:
            st[S_REMOVED] += 1
        if nodes[N_SHADOW, e] >= 0:
            keys[SHADOWS, nodes[N_SHADOW, e]] -= 1
        sib = nodes[N_SIB, e]
        nodes[N_SIB, e] = st[S_NODES]
        st[S_NODES] = e
        e = sib
    pool[FIRST, b], pool[TOKENS, b] = -1, 0
    return True


def move_hashes(src, dst, cfg, state):  # pragma: no cover - compiled
    """Re-point src's keys to the unhashed dst (BlockPool.move_hashes): the primary first,
    then the others in ascending order; not an eviction."""
    pool, st, scratch, nodes = state[0], state[1], state[5], state[6]
    tokens, count = pool[TOKENS, src], 0
    e = pool[FIRST, src]
    while e >= 0:
        scratch[count] = nodes[N_KEY, e]
        count += 1
        e = nodes[N_SIB, e]
    for j in range(2, count):  # the others ascending (a few: an insertion sort)
        key, k = scratch[j], j
        while k > 1 and scratch[k - 1] > key:
            scratch[k] = scratch[k - 1]
            k -= 1
        scratch[k] = key
    removed = st[S_REMOVED]
    remove_hashes(src, cfg, state)
    st[S_REMOVED] = removed
    for j in range(count):
        insert(scratch[j], dst, tokens, -1, state)


def new_block(cfg, state):  # pragma: no cover - compiled
    """The free queue's head, its keys evicted (BlockPool.new_blocks); unbounded: a fresh
    id."""
    pool, st, keys, nodes = state[0], state[1], state[2], state[6]
    if not cfg[C_BOUNDED]:
        if st[S_FRESH] >= pool.shape[1]:
            raise AssertionError("hybrid replay: out of block ids")
        st[S_FRESH] += 1
        return st[S_FRESH] - 1
    b = pool[NEXT, pool.shape[1] - 1]
    if b == pool.shape[1] - 1:  # every step checks it fits first: a bug, not a user's error
        raise AssertionError("hybrid replay: the free queue is empty")
    unlink(b, pool, st)
    if pool[FIRST, b] >= 0:
        if cfg[C_TRACK_EVICTED]:
            e = pool[FIRST, b]
            while e >= 0:
                keys[EVICTED, nodes[N_KEY, e]] = 1
                e = nodes[N_SIB, e]
        remove_hashes(b, cfg, state)
    pool[REF, b] = 1
    return b


def touch(b, cfg, state):  # pragma: no cover - compiled
    """A hit pins block b (out of the free queue if it was in it)."""
    pool = state[0]
    if b != 0 and cfg[C_BOUNDED]:
        if pool[REF, b] == 0:
            unlink(b, pool, state[1])
        pool[REF, b] += 1


def free_list(blocks, count, cfg, state):  # pragma: no cover - compiled
    """BlockPool.free_blocks of blocks[:count] (NULL skipped), in eviction order: hashed
    ones to the queue's tail in that order, the others to its head (the first ends up
    first)."""
    if not cfg[C_BOUNDED]:
        return
    pool, st = state[0], state[1]
    sentinel = pool.shape[1] - 1
    heads = 0
    for j in range(count):
        b = blocks[j]
        if b == 0:
            continue
        pool[REF, b] -= 1
        if pool[REF, b] == 0:
            if pool[FIRST, b] >= 0:
                link(b, pool[PREV, sentinel], pool, st)
            else:  # kept in order in the slots already read
                blocks[heads] = b
                heads += 1
    for k in range(heads - 1, -1, -1):
        link(blocks[k], sentinel, pool, st)


def unlink(b, pool, st):  # pragma: no cover - compiled
    pool[NEXT, pool[PREV, b]], pool[PREV, pool[NEXT, b]] = pool[NEXT, b], pool[PREV, b]
    st[S_FREE] -= 1


def link(b, before, pool, st):  # pragma: no cover - compiled
    """Put b in the free queue right after `before` (the sentinel: at the head)."""
    after = pool[NEXT, before]
    pool[NEXT, before], pool[PREV, b], pool[NEXT, b], pool[PREV, after] = b, before, after, b
    st[S_FREE] += 1
