"""The arrays the compiled hybrid replay keeps (hybrid.py builds them, hybrid_loop.py,
lookup_loop.py and pool_loop.py work on them): what each row and field index means. All
int64 but `keys`, the largest (a column per hash id and group), int32. Block 0 is vLLM's
null block (NULL = 0 in a table); -1 means none.

    cfg[C_*]            the layout: block size, hash block size (match unit), groups, window,
                        retention (-1: None), token budget (0: none), ...; the group types
                        from C_TYPES on, in vLLM's order (FA, then SWA, then MAMBA)
    state = (pool, st, keys, req, mgr, scratch, nodes):
    pool[REF, b]        requests holding block b (0 = in the free queue)
    pool[FIRST, b]      b's first entry (-1: no key); pool[TOKENS, b] its primary's tokens
    pool[NEXT / PREV]   the free queue, a linked list; column n is its sentinel (an unbounded
                        pool hands out fresh ids and keeps no queue)
    st[S_*]             free blocks, next fresh block, sparse keys removed, free entries,
                        next fresh entry
    keys[HOLDER, k]     key k's first entry (k = hash id * G + group), keys[TAIL, k] its last;
                        keys[EVER, k]: a sparse key ever cached; keys[EVICTED, k]: k was
                        evicted (when tracked); keys[SHADOWS, k]: entries whose plain key
                        (no lookahead: EAGLE's diagnostics) is k
    req[TABLE, g]       the block table of the request in flight, per group; req[HIT, g] the
                        lookup's hit blocks
    mgr[g, M_*]         group g's manager fields for that request (managers.py, mamba.py)
    scratch             room for a list of blocks or keys
    nodes[N_*, e]       entry e, a (block, key) pair: a block may carry several keys (its
                        primary, sub-block entries) and a key several blocks (oldest first);
                        N_SHADOW its plain key (-1 none)
"""

from __future__ import annotations

FA, SWA, MAMBA = 0, 1, 2
(
    C_B, C_G, C_W, C_NEED, C_RETENTION, C_BUDGET, C_CAP, C_BOUNDED, C_NFA, C_NSWA, C_H,
    C_FINE, C_TRACK_EVICTED, C_LOOKAHEAD, C_DRAFT_SLOTS, C_SPEC_BLOCKS, C_DROP, C_HYBRID,
) = range(18)  # fmt: skip
C_TYPES = 20
REF, FIRST, TOKENS, NEXT, PREV = range(5)
S_FREE, S_FRESH, S_REMOVED, S_NODES, S_NODE_FRESH = range(5)
HOLDER, EVER, EVICTED, TAIL, SHADOWS = range(5)
TABLE, HIT = range(2)
# partial hit: (slot, source block); copy: this step's copy-on-write (source, copy)
M_USED, M_CACHED, M_ACTIVE, M_LAST, M_RETIRED, M_ALLOCATED = range(6)
M_PARTIAL_SLOT, M_PARTIAL_SOURCE, M_COPY_SOURCE, M_COPY = range(6, 10)
N_KEY, N_BLOCK, N_AFTER, N_SIB, N_BEFORE, N_SHADOW = range(6)
# out[i, O_*]: a request's answers; O_FAIL is one of OK, NOT_ADMITTED, PREFILL, DECODE
(
    O_HIT, O_LONGEST, O_EVICTED, O_JUNCTION, O_FAIL, O_DONE, O_CHUNKS, O_CACHED_EVER,
    O_ATTENTION,
) = range(9)  # fmt: skip
OK, NOT_ADMITTED, PREFILL, DECODE = 0, 1, 2, 3
