"""The compiled loop of hybrid.py: coordinator.py, the managers and block_pool.py for
whole-block hashes and no drafter, over arrays. Every function here runs compiled (numba);
names and the order of operations follow the Python modules, which document them.

`cfg[C_*]` is the layout (block size, groups, window, retention with -1 for None, ...), the
group types from `C_TYPES` on, in vLLM's order (FA, then SWA, then MAMBA). The rest is
`state` = (pool, st, keys, req, mgr, scratch), int64 arrays (block 0 is vLLM's null block,
NULL = 0 in a table):

    pool[ROW, b]    per block: ref count, key (hash id * G + g; -1 none), `after` (the next
                    block holding the same key), the free queue's links (column n is its
                    sentinel); an unbounded pool hands out fresh ids and keeps no queue
    st[S_*]         free blocks, the next fresh block (unbounded), sparse keys removed
    keys[HOLDER, k] key k's oldest holder (-1 none); keys[EVER, k]: a sparse key ever cached
    req[TABLE, g]   the block table of the request in flight, per group; req[HIT, g] the
                    lookup's hit blocks; mgr[g, M_*] the group manager's fields
"""

from __future__ import annotations

FA, SWA, MAMBA = 0, 1, 2
C_B, C_G, C_W, C_NEED, C_RETENTION, C_BUDGET, C_CAP, C_BOUNDED, C_NFA, C_NSWA = range(10)
C_TYPES = 10
REF, KEY, AFTER, NEXT, PREV = range(5)
S_FREE, S_FRESH, S_REMOVED = range(3)
HOLDER, EVER = range(2)
TABLE, HIT = range(2)
M_USED, M_CACHED, M_ACTIVE, M_LAST, M_RETIRED, M_ALLOCATED = range(6)
# out[i, O_*]; O_FAIL is one of OK, NOT_ADMITTED, PREFILL, DECODE (as in dense.py)
O_HIT, O_LONGEST, O_EVICTED, O_JUNCTION, O_FAIL, O_DONE, O_CHUNKS = range(7)
OK, NOT_ADMITTED, PREFILL, DECODE = 0, 1, 2, 3


def replay(
    ids, offsets, prompt, outputs, cfg, events, state, cstart, chunks, out
):  # pragma: no cover  # noqa: E501
    """Every request in order; request i's prefill chunks go to chunks[cstart[i]:]."""
    for i in range(prompt.shape[0]):
        if prompt[i] >= 1:
            hashes = ids[offsets[i] : offsets[i + 1]]
            one(hashes, prompt[i], outputs[i], cfg, events, state, chunks[cstart[i] :], out[i])


def one(hashes, P, num_outputs, cfg, events, state, chunks, out):  # pragma: no cover
    """One request, lookup to free (replay.VllmReplay.replay_one)."""
    st, mgr = state[1], state[4]
    longest = leading_run(hashes, P, cfg, state)
    hit = lookup(hashes, P, longest, cfg, state, False)
    evicted = 0
    if longest > hit and st[S_REMOVED] > 0:
        evicted = lookup(hashes, P, longest, cfg, state, True) - hit
    junction = longest if longest > hit else 0
    out[O_HIT], out[O_LONGEST], out[O_EVICTED], out[O_JUNCTION] = hit, longest, evicted, junction
    mgr[:] = 0
    mgr[:, M_LAST] = -1
    n = chunk(P, hit, P - hit, cfg, junction)
    if n == 0 or not step(hashes, P, P, 0, n, hit, junction, cfg, state):
        out[O_FAIL] = NOT_ADMITTED
        free(cfg, state)
        return
    chunks[0], done, computed = n, 1, hit + n
    while computed < P:
        n = chunk(P, computed, P - computed, cfg, junction)
        if n == 0 or not step(hashes, P, P, computed, n, 0, junction, cfg, state):
            out[O_FAIL], out[O_CHUNKS] = PREFILL, done
            free(cfg, state)
            return
        chunks[done], done, computed = n, done + 1, computed + n
    out[O_CHUNKS] = done
    # decode, at the positions where a step can change anything (replay._event_positions)
    c, end = P, P + max(num_outputs, 1) - 1
    while c < end:
        if not step(hashes, P, c + 1, c, 1, 0, junction, cfg, state):
            out[O_FAIL], out[O_DONE] = DECODE, c - P
            break
        c = next_event(c, cfg[C_B], events)
    free(cfg, state)


def next_event(c, B, events):  # pragma: no cover - compiled
    """The first position after c whose offset in its block is in `events` (sorted)."""
    base = c - c % B
    for r in events:
        if base + r > c:
            return base + r
    return base + B + events[0]


def chunk(P, start, wanted, cfg, junction):  # pragma: no cover - compiled
    """Tokens the next prefill step schedules from `start` (scheduler.chunk_tokens; the
    sequence is the prompt while it prefills)."""
    budget, B = cfg[C_BUDGET], cfg[C_B]
    n = wanted if budget == 0 else min(wanted, budget)
    if cfg[C_G] == cfg[C_NFA] + cfg[C_NSWA] or start >= P:
        return n  # no Mamba group: nothing to align
    end = start + n
    if end < P:
        aligned = end // B * B
        if aligned > start or budget == 0 or B <= budget:
            end = aligned
    stop = end
    checkpoint = max((P - 1) // B * B, 0)  # mamba.checkpoint_position
    if start < checkpoint < stop:
        stop = checkpoint
    if start % B and start < (start // B + 1) * B < stop:
        stop = (start // B + 1) * B
    if start < junction < end:
        at = start + (junction - start) // B * B
        if start < at < stop:
            stop = at
    return max(stop - start, 0)


# -- lookup (coordinator.Coordinator.lookup and the managers' longest_hit) ----------------------


def held(h, g0, g1, cfg, keys, use_ever):  # pragma: no cover - compiled
    """Whether hash id h is cached in every group g0 .. g1 - 1 (ever cached: `use_ever`)."""
    G = cfg[C_G]
    for g in range(g0, g1):
        if use_ever:
            if keys[EVER, h * G + g] == 0:
                return False
        elif keys[HOLDER, h * G + g] < 0:
            return False
    return True


def fill_hit(hashes, first, last, g0, g1, cfg, state):  # pragma: no cover - compiled
    """req[HIT, g, :last]: NULL before `first`, the oldest holders from `first` on."""
    keys, req, G = state[2], state[3], cfg[C_G]
    for g in range(g0, g1):
        for j in range(last):
            req[HIT, g, j] = 0 if j < first else keys[HOLDER, hashes[j] * G + g]


def leading_run(hashes, P, cfg, state):  # pragma: no cover - compiled
    """Full attention's match (tokens): the leading run of prompt blocks every full-attention
    group holds, capped at P - 1; their blocks in req[HIT]."""
    B, nfa = cfg[C_B], cfg[C_NFA]
    count = min((P - 1) // B, hashes.shape[0])
    run = 0
    while run < count and held(hashes[run], 0, nfa, cfg, state[2], False):
        run += 1
    fill_hit(hashes, 0, run, 0, nfa, cfg, state)
    return run * B


def window_hit(hashes, cur, cfg, state, use_ever):  # pragma: no cover - compiled
    """SlidingWindowManager.longest_hit: the right-most run of `need` blocks ending <= cur,
    else the run from block 0."""
    B, g0 = cfg[C_B], cfg[C_NFA]
    g1 = g0 + cfg[C_NSWA]
    run = 0
    for i in range(cur // B - 1, -1, -1):
        if not held(hashes[i], g0, g1, cfg, state[2], use_ever):
            run = 0
            continue
        run += 1
        if run >= cfg[C_NEED]:
            if not use_ever:
                fill_hit(hashes, i, i + run, g0, g1, cfg, state)
            return (i + run) * B
    if not use_ever:
        fill_hit(hashes, 0, run, g0, g1, cfg, state)
    return run * B


def state_hit(hashes, cur, cfg, state, use_ever):  # pragma: no cover - compiled
    """MambaManager.longest_hit: the highest state at or below cur."""
    B, g0 = cfg[C_B], cfg[C_NFA] + cfg[C_NSWA]
    for i in range(min(cur // B, hashes.shape[0]) - 1, -1, -1):
        if held(hashes[i], g0, cfg[C_G], cfg, state[2], use_ever):
            if not use_ever:
                fill_hit(hashes, i, i + 1, g0, cfg[C_G], cfg, state)
            return (i + 1) * B
    return 0


def lookup(hashes, P, attention, cfg, state, use_ever):  # pragma: no cover - compiled
    """The hit: full attention's match, shrunk by the sparse types to a fixed point (one
    pass with exactly two types). `use_ever`: as if no sparse key had been evicted."""
    nswa, nm = cfg[C_NSWA], cfg[C_G] - cfg[C_NFA] - cfg[C_NSWA]
    hit = P - 1
    while True:
        cur = min(hit, attention)
        if nswa:
            cur = window_hit(hashes, cur, cfg, state, use_ever)
        if nm:
            cur = state_hit(hashes, cur, cfg, state, use_ever)
        shrunk = cur < hit
        hit = cur
        if not shrunk or (nswa > 0) + (nm > 0) == 1:
            return hit


# -- one scheduled step (coordinator.Coordinator.step) ------------------------------------------


def step(hashes, P, num_tokens, computed, n, hit, junction, cfg, state):  # pragma: no cover
    """vLLM `allocate_slots` for n tokens after `computed`; at admission (`computed` 0) the
    hit is adopted and the whole prompt must fit first. False = it does not fit (only
    releases happened)."""
    admission = computed == 0
    computed += hit
    main = computed + n
    G, st = cfg[C_G], state[1]
    hit_blocks = hit // cfg[C_B] if admission else 0
    if cfg[C_BOUNDED] and admission:
        need = 0
        for g in range(G):
            need += needed(g, num_tokens, computed, hit_blocks, num_tokens, True, cfg, state)
        if need > st[S_FREE]:
            return False
    for g in range(G):
        remove_skipped(g, computed, cfg, state)
    if cfg[C_BOUNDED]:
        need = 0
        for g in range(G):
            need += needed(g, main, computed, hit_blocks, main, False, cfg, state)
        if need > st[S_FREE]:
            return False
    if hit:
        for g in range(G):
            add_hit(g, hit, cfg, state)
    for g in range(G):
        allocate(g, main, cfg, state)
    tokens = min(main, num_tokens) // cfg[C_B] * cfg[C_B]
    for g in range(G):
        cache(g, hashes, tokens, P, junction, cfg, state)
    return True


def skipped_tokens(g, computed, cfg):  # pragma: no cover - compiled
    """Tokens before the window of the next token (Manager.skipped_tokens)."""
    if cfg[C_TYPES + g] == SWA:
        return max(0, computed - cfg[C_W] + 1)
    if cfg[C_TYPES + g] == MAMBA:
        return computed - 1
    return 0


def needed(g, slots, computed, hit_blocks, main, admission, cfg, state):  # pragma: no cover
    """Pool blocks group g takes this step, hit blocks leaving the free queue included
    (Manager.blocks_needed, MambaManager.blocks_needed)."""
    pool, req, mgr = state[0], state[3], state[4]
    B, used = cfg[C_B], mgr[g, M_USED]
    if cfg[C_TYPES + g] == MAMBA:
        new = -(-main // B) - hit_blocks - used
        return min(new, 1) + evictable(req[HIT, g, :hit_blocks], pool)
    required = -(-slots // B)
    if admission and cfg[C_TYPES + g] == SWA and cfg[C_CAP] >= 0:
        required = min(required, cfg[C_CAP])
    if mgr[g, M_ACTIVE]:
        return max(required - used, 0)
    skipped = skipped_tokens(g, computed, cfg) // B
    new = max(required - max(skipped, hit_blocks + used), 0)
    return new + evictable(req[HIT, g, max(0, skipped - used) : hit_blocks], pool)


def evictable(blocks, pool):  # pragma: no cover - compiled
    """How many of `blocks` sit in the free queue (NULL never does)."""
    count = 0
    for b in blocks:
        if b != 0 and pool[REF, b] == 0:
            count += 1
    return count


def add_hit(g, hit, cfg, state):  # pragma: no cover - compiled
    """Adopt the lookup's blocks: pin them, NULL before the group's window."""
    pool, st, req, mgr = state[0], state[1], state[3], state[4]
    skipped = skipped_tokens(g, hit, cfg) // cfg[C_B]
    count = hit // cfg[C_B]
    for j in range(count):
        b = 0 if j < skipped else req[HIT, g, j]
        req[TABLE, g, j] = b
        if b != 0 and cfg[C_BOUNDED]:
            if pool[REF, b] == 0:
                unlink(b, pool, st)
            pool[REF, b] += 1
    mgr[g, M_USED] = mgr[g, M_CACHED] = count
    mgr[g, M_ACTIVE] = 1


def allocate(g, main, cfg, state):  # pragma: no cover - compiled
    """Grow group g's table to cover `main` tokens; a Mamba group allocates only its
    running state, NULL before it (MambaManager.allocate)."""
    req, mgr = state[3], state[4]
    used = mgr[g, M_USED]
    required = -(-main // cfg[C_B])
    if cfg[C_TYPES + g] == MAMBA:
        if required <= used:
            mgr[g, M_ALLOCATED] = 1
            return
        if used > 0:
            mgr[g, M_LAST] = used - 1
        while used < required - 1:
            req[TABLE, g, used] = 0
            used += 1
        mgr[g, M_ALLOCATED] = 1
    while used < required:
        req[TABLE, g, used] = new_block(cfg, state)
        used += 1
    mgr[g, M_USED] = used


def remove_skipped(g, computed, cfg, state):  # pragma: no cover - compiled
    """Release the blocks group g no longer reads (Manager / MambaManager.remove_skipped)."""
    req, mgr, scratch = state[3], state[4], state[5]
    B, used, kind = cfg[C_B], mgr[g, M_USED], cfg[C_TYPES + g]
    count = 0
    if kind == SWA:
        for i in range(min(skipped_tokens(g, computed, cfg) // B, used) - 1, -1, -1):
            if req[TABLE, g, i] == 0:
                break
            scratch[count], req[TABLE, g, i] = req[TABLE, g, i], 0
            count += 1
        free_list(scratch, count, cfg, state)
    if kind != MAMBA:
        return
    last = min((computed - 1) // B, used)
    if computed > 1 and mgr[g, M_RETIRED] < last:
        for i in range(last - 1, mgr[g, M_RETIRED] - 1, -1):
            if req[TABLE, g, i] != 0:
                scratch[count], req[TABLE, g, i] = req[TABLE, g, i], 0
                count += 1
        free_list(scratch, count, cfg, state)
        mgr[g, M_RETIRED] = last
    slot = mgr[g, M_LAST]
    if 0 <= slot < -(-computed // B) - 1 and req[TABLE, g, slot] != 0:
        scratch[0], req[TABLE, g, slot] = req[TABLE, g, slot], 0
        free_list(scratch, 1, cfg, state)


# -- caching ----------------------------------------------------------------------------------


def kept(g, i, P, junction, cfg):  # pragma: no cover - compiled
    """Whether slot i of group g may be hashed (the managers' `mask`): a Mamba state at a
    multiple of the retention interval or a boundary (P - 1, the junction); a window tail
    that ends at one."""
    retention, B, kind = cfg[C_RETENTION], cfg[C_B], cfg[C_TYPES + g]
    if kind == FA or retention < 0:
        return True
    per = retention // B
    if kind == MAMBA:
        if retention and (per <= 1 or (i + 1) % per == 0):
            return True
        return i == (P - 1) // B - 1 or (junction > 0 and i == junction // B - 1)
    need = cfg[C_NEED]
    if retention and (need >= per or i % per >= per - need):
        return True
    if (P - 1) // B - need <= i < (P - 1) // B:
        return True
    return junction > 0 and junction // B - need <= i < junction // B


def cache(g, hashes, tokens, P, junction, cfg, state):  # pragma: no cover - compiled
    """Key group g's blocks that `tokens` filled since the last call (Manager.cache)."""
    pool, keys, req, mgr = state[0], state[2], state[3], state[4]
    full = min(tokens // cfg[C_B], hashes.shape[0])
    start = mgr[g, M_CACHED]
    if start >= full:
        return
    for i in range(start, full):
        b = req[TABLE, g, i]
        if b == 0 or not kept(g, i, P, junction, cfg):
            continue
        if pool[KEY, b] >= 0:
            unmap(b, cfg, state)
        key = hashes[i] * cfg[C_G] + g
        pool[KEY, b], pool[AFTER, b] = key, -1
        first = keys[HOLDER, key]
        if first < 0:
            keys[HOLDER, key] = b
        else:
            while pool[AFTER, first] >= 0:
                first = pool[AFTER, first]
            pool[AFTER, first] = b
        if cfg[C_TYPES + g] != FA:
            keys[EVER, key] = 1
    mgr[g, M_CACHED] = full
    mgr[g, M_ACTIVE] = 1


def unmap(b, cfg, state):  # pragma: no cover - compiled
    """Drop block b from its key's holders (an eviction, or a re-key)."""
    pool, st, keys = state[0], state[1], state[2]
    key = pool[KEY, b]
    first = keys[HOLDER, key]
    if first == b:
        keys[HOLDER, key] = pool[AFTER, b]
    else:
        while pool[AFTER, first] != b:
            first = pool[AFTER, first]
        pool[AFTER, first] = pool[AFTER, b]
    pool[KEY, b], pool[AFTER, b] = -1, -1
    if cfg[C_TYPES + key % cfg[C_G]] != FA:
        st[S_REMOVED] += 1


# -- the pool ---------------------------------------------------------------------------------


def new_block(cfg, state):  # pragma: no cover - compiled
    """The free queue's head, its keys evicted (unbounded: a fresh id)."""
    pool, st = state[0], state[1]
    if not cfg[C_BOUNDED]:
        st[S_FRESH] += 1
        return st[S_FRESH] - 1
    b = pool[NEXT, pool.shape[1] - 1]
    unlink(b, pool, st)
    if pool[KEY, b] >= 0:
        unmap(b, cfg, state)
    pool[REF, b] = 1
    return b


def free_list(blocks, count, cfg, state):  # pragma: no cover - compiled
    """BlockPool.free_blocks of blocks[:count], in eviction order: hashed ones to the
    queue's tail in that order, the others to its head (the first ends up first)."""
    if not cfg[C_BOUNDED]:
        return
    pool, st = state[0], state[1]
    sentinel = pool.shape[1] - 1
    heads = 0
    for j in range(count):
        b = blocks[j]
        pool[REF, b] -= 1
        if pool[REF, b] == 0:
            if pool[KEY, b] >= 0:
                link(b, pool[PREV, sentinel], pool, st)
            else:  # kept in order in the slots already read
                blocks[heads] = b
                heads += 1
    for k in range(heads - 1, -1, -1):
        link(blocks[k], sentinel, pool, st)


def free(cfg, state):  # pragma: no cover - compiled
    """The request finished: each group releases its table, tail first (Coordinator.free)."""
    req, mgr, scratch = state[3], state[4], state[5]
    for g in range(cfg[C_G]):
        count = 0
        for i in range(mgr[g, M_USED] - 1, -1, -1):
            if req[TABLE, g, i] != 0:
                scratch[count] = req[TABLE, g, i]
                count += 1
        free_list(scratch, count, cfg, state)
        mgr[g, M_USED] = 0


def unlink(b, pool, st):  # pragma: no cover - compiled
    pool[NEXT, pool[PREV, b]], pool[PREV, pool[NEXT, b]] = pool[NEXT, b], pool[PREV, b]
    st[S_FREE] -= 1


def link(b, before, pool, st):  # pragma: no cover - compiled
    """Put b in the free queue right after `before` (the sentinel: at the head)."""
    after = pool[NEXT, before]
    pool[NEXT, before], pool[PREV, b], pool[NEXT, b], pool[PREV, after] = b, before, after, b
    st[S_FREE] += 1
