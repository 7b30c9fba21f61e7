"""The compiled loop of hybrid.py: coordinator.py and the managers over arrays (their
fields and rows: loop_fields.py; the pool: pool_loop.py). Every function here runs compiled
(numba); names and the order of operations follow the Python modules, which document them.

Hashes come one per match unit H (`s` = B // H per block); a block's key is the hash of its
last unit. With sub-block hits on (`C_FINE`), prompt tails and Mamba states also get
entries at unit boundaries, and a hit ending inside a block is copied before it is written.
"""

from __future__ import annotations

from analyzer.sim.vllm.compiled import lookup_loop as lk
from analyzer.sim.vllm.compiled import pool_loop as pl
from analyzer.sim.vllm.compiled.loop_fields import (
    C_B,
    C_BOUNDED,
    C_BUDGET,
    C_CAP,
    C_DRAFT_SLOTS,
    C_DROP,
    C_FINE,
    C_G,
    C_H,
    C_HYBRID,
    C_LOOKAHEAD,
    C_NEED,
    C_NFA,
    C_NSWA,
    C_RETENTION,
    C_SPEC_BLOCKS,
    C_TRACK_EVICTED,
    C_TYPES,
    C_W,
    DECODE,
    EVER,
    FA,
    HIT,
    HOLDER,
    M_ACTIVE,
    M_ALLOCATED,
    M_CACHED,
    M_COPY,
    M_COPY_SOURCE,
    M_LAST,
    M_PARTIAL_SLOT,
    M_PARTIAL_SOURCE,
    M_RETIRED,
    M_USED,
    MAMBA,
    NOT_ADMITTED,
    O_ATTENTION,
    O_CACHED_EVER,
    O_CHUNKS,
    O_DONE,
    O_EVICTED,
    O_FAIL,
    O_HIT,
    O_JUNCTION,
    O_LONGEST,
    PREFILL,
    REF,
    SHADOWS,
    SWA,
    TABLE,
    TOKENS,
)  # fmt: skip


def replay(
    ids, plain_ids, offsets, prompt, outputs, cfg, events, state, cstart, chunks, out
):  # pragma: no cover  # noqa: E501
    """Every request in order; request i's prefill chunks go to chunks[cstart[i]:].
    `plain_ids`: without lookahead (`ids` itself when there is none)."""
    for i in range(prompt.shape[0]):
        if prompt[i] >= 1:
            hashes, plain = ids[offsets[i] : offsets[i + 1]], plain_ids[offsets[i] : offsets[i + 1]]
            one(
                hashes,
                plain,
                prompt[i],
                outputs[i],
                cfg,
                events,
                state,
                chunks[cstart[i] :],
                out[i],
            )


def one(hashes, plain, P, num_outputs, cfg, events, state, chunks, out):  # pragma: no cover
    """One request, lookup to free (reference.VllmReplay.replay_one)."""
    st, mgr = state[1], state[4]
    longest = lk.attention_hit(hashes, P, cfg, state)
    hit = lk.lookup(hashes, P, longest, cfg, state, False)
    out[O_ATTENTION] = longest
    if cfg[C_LOOKAHEAD]:
        out[O_ATTENTION] = lk.attention_match(plain, P, cfg, state, SHADOWS)
    elif cfg[C_DROP]:
        out[O_ATTENTION] = lk.attention_match(hashes, P, cfg, state, HOLDER)
    if cfg[C_TRACK_EVICTED]:
        out[O_CACHED_EVER] = lk.cached_ever(hashes, P, longest, cfg, state)
    if longest > hit and st[pl.S_REMOVED] > 0:
        out[O_EVICTED] = lk.lookup(hashes, P, longest, cfg, state, True) - hit
    junction = longest if longest > hit else 0
    out[O_HIT], out[O_LONGEST], out[O_JUNCTION] = hit, longest, junction
    mgr[:] = 0
    mgr[:, M_LAST] = mgr[:, M_PARTIAL_SLOT] = -1
    # a drafter pads a one-token step with a draft slot (reference.VllmReplay._admit)
    pad = cfg[C_DRAFT_SLOTS] > 0 and P - hit == 1 and hit > 0
    n = chunk(P, hit, 2 if pad else P - hit, cfg, junction)
    if pad and n != 2:
        n, pad = 1, False
    if n == 0 or not step(hashes, plain, P, P, 0, n, hit, junction, cfg, state):
        out[O_FAIL] = NOT_ADMITTED
        free(cfg, state)
        return
    chunks[0], done, computed = n, 1, hit + n - pad
    while computed < P:
        n = chunk(P, computed, P - computed, cfg, junction)
        if n == 0 or not step(hashes, plain, P, P, computed, n, 0, junction, cfg, state):
            out[O_FAIL], out[O_CHUNKS] = PREFILL, done
            free(cfg, state)
            return
        chunks[done], done, computed = n, done + 1, computed + n
    out[O_CHUNKS] = done
    sampled(hashes, plain, P, computed, junction, cfg, state)
    # decode, at the positions where a step can change anything (reference._event_positions)
    c, end = P, P + max(num_outputs, 1) - 1
    while c < end:
        if not step(hashes, plain, P, c + 1, c, 1, 0, junction, cfg, state):
            out[O_FAIL], out[O_DONE] = DECODE, c - P
            break
        sampled(hashes, plain, P, c + 1, junction, cfg, state)
        c = next_event(c, cfg[C_B], events)
    free(cfg, state)


def sampled(hashes, plain, P, computed, junction, cfg, state):  # pragma: no cover - compiled
    """A step sampled a token; with a drafter vLLM caches the computed blocks once more
    (reference.VllmReplay._sampled)."""
    if cfg[C_DRAFT_SLOTS]:
        cache_all(hashes, plain, P, computed, computed + 1, junction, cfg, state)


def next_event(c, B, events):  # pragma: no cover - compiled
    """The first position after c whose offset in its block is in `events` (sorted)."""
    base = c - c % B
    for r in events:
        if base + r > c:
            return base + r
    return base + B + events[0]


def checkpoint(n, unit, cfg):  # pragma: no cover - compiled
    """mamba.checkpoint_position: the last `unit` boundary of n tokens a later request can
    resume from (the last token and the lookahead left out; the EAGLE drop: one unit less)."""
    if cfg[C_DROP]:
        return max(n // unit * unit - unit, 0)
    return max((n - max(1, cfg[C_LOOKAHEAD])) // unit * unit, 0)


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
    last = checkpoint(P, B, cfg)
    if start < last < stop:
        stop = last
    if start % B and start < (start // B + 1) * B < stop:
        stop = (start // B + 1) * B
    tail = checkpoint(P, cfg[C_H], cfg)  # the prompt's last unit boundary
    if cfg[C_FINE] and last < tail < P and start < tail < stop:
        stop = tail
    if start < junction < end:
        at = start + (junction - start) // B * B
        if start < at < stop:
            stop = at
    return max(stop - start, 0)


# -- one scheduled step (coordinator.Coordinator.step) ------------------------------------------


def step(hashes, plain, P, num_tokens, computed, n, hit, junction, cfg, state):  # pragma: no cover
    """vLLM `allocate_slots` for n tokens after `computed` (+ draft slots); at admission
    (`computed` 0) the hit is adopted and the whole prompt must fit first. False = it does
    not fit (only releases happened). `num_tokens`: the sequence's length."""
    admission = computed == 0
    computed += hit
    main = computed + n
    slots = main + cfg[C_DRAFT_SLOTS]
    G, st, mgr = cfg[C_G], state[1], state[4]
    hit_len = -(-hit // cfg[C_B]) if admission else 0  # hit blocks per group
    if cfg[C_BOUNDED] and admission:
        need = 0
        for g in range(G):
            need += needed(g, num_tokens, computed, hit_len, hit, num_tokens, True, cfg, state)
        if need > st[pl.S_FREE]:
            return False
    for g in range(G):
        remove_skipped(g, computed, cfg, state)
    if cfg[C_BOUNDED]:
        need = 0
        for g in range(G):
            need += needed(g, slots, computed, hit_len, hit, main, False, cfg, state)
        if need > st[pl.S_FREE]:
            return False
    if hit:
        for g in range(G):
            add_hit(g, hit, cfg, state)
    for g in range(G):
        allocate(g, slots, main, cfg, state)
    cache_all(hashes, plain, P, min(main, num_tokens), num_tokens, junction, cfg, state)
    # the copies have run: their sources and copies are released, group by group
    scratch, count = state[5], 0
    for g in range(G):
        if mgr[g, M_COPY]:
            scratch[count], scratch[count + 1] = mgr[g, M_COPY_SOURCE], mgr[g, M_COPY]
            mgr[g, M_COPY_SOURCE] = mgr[g, M_COPY] = 0
            count += 2
    pl.free_list(scratch, count, cfg, state)
    return True


def cache_all(hashes, plain, P, tokens, num_tokens, junction, cfg, state):  # pragma: no cover
    """Coordinator.cache: every group keys what `tokens` filled (whole blocks unless
    sub-block hits are on); `num_tokens` is the sequence's length (hashes exist up to it,
    less the lookahead)."""
    whole = cfg[C_HYBRID] and not cfg[C_FINE]  # a single group is offered every token
    floored = tokens // cfg[C_B] * cfg[C_B] if whole else tokens
    for g in range(cfg[C_G]):
        # the EAGLE drop's full attention is offered every token (its tail may be inside)
        drop = cfg[C_DROP] and cfg[C_TYPES + g] == FA and floored > 0
        cache(g, hashes, plain, tokens if drop else floored, num_tokens, P, junction, cfg, state)


def skipped_tokens(g, computed, cfg):  # pragma: no cover - compiled
    """Tokens before the window of the next token (Manager.skipped_tokens)."""
    if cfg[C_TYPES + g] == SWA:
        return max(0, computed - cfg[C_W] + 1)
    if cfg[C_TYPES + g] == MAMBA:
        return computed - 1
    return 0


def needed(g, slots, computed, hit_len, hit, main, admission, cfg, state):  # pragma: no cover
    """Pool blocks group g takes this step, hit blocks leaving the free queue included
    (Manager.blocks_needed, MambaManager.blocks_needed); +1 for a copy-on-write."""
    pool, req, mgr = state[0], state[3], state[4]
    B, used = cfg[C_B], mgr[g, M_USED]
    partial = hit_len > 0 and hit % B != 0
    if cfg[C_TYPES + g] == MAMBA:  # draft slots take no state; speculative blocks do
        spec = cfg[C_SPEC_BLOCKS]
        new = -(-main // B) + spec - hit_len - used
        partial = partial or mgr[g, M_PARTIAL_SLOT] >= 0
        if partial:
            new = max(new, 0) + 1
        if new > 0:
            new = min(new, 1 + partial + (0 if mgr[g, M_ALLOCATED] else spec))
        return new + evictable(req[HIT, g, :hit_len], pool)
    required = -(-slots // B)
    if admission and cfg[C_TYPES + g] == SWA and cfg[C_CAP] >= 0:
        required = min(required, cfg[C_CAP])
    if mgr[g, M_ACTIVE]:
        return max(required - used, 0)
    skipped = skipped_tokens(g, computed, cfg) // B
    new = max(required - max(skipped, hit_len + used), 0)
    return new + partial + evictable(req[HIT, g, max(0, skipped - used) : hit_len], pool)


def evictable(blocks, pool):  # pragma: no cover - compiled
    """How many of `blocks` sit in the free queue (NULL never does)."""
    count = 0
    for b in blocks:
        if b != 0 and pool[REF, b] == 0:
            count += 1
    return count


def add_hit(g, hit, cfg, state):  # pragma: no cover - compiled
    """Adopt the lookup's blocks: pin them, NULL before the group's window; a hit inside a
    block is copied at allocation (Manager.add_hit)."""
    req, mgr, B = state[3], state[4], cfg[C_B]
    skipped = skipped_tokens(g, hit, cfg) // B
    count = -(-hit // B)
    for j in range(count):
        b = 0 if j < skipped else req[HIT, g, j]
        req[TABLE, g, j] = b
        pl.touch(b, cfg, state)
    mgr[g, M_USED] = mgr[g, M_CACHED] = count
    mgr[g, M_ACTIVE] = 1
    if hit % B:
        mgr[g, M_PARTIAL_SLOT], mgr[g, M_PARTIAL_SOURCE] = hit // B, req[HIT, g, count - 1]
        mgr[g, M_CACHED] = hit // B


def allocate(g, slots, main, cfg, state):  # pragma: no cover - compiled
    """Grow group g's table to cover `slots` tokens, copying a partial hit first; a Mamba
    group allocates only its running state (+ speculative blocks, moved up to the new
    tail) for `main` tokens, NULL before it (MambaManager.allocate)."""
    pool, req, mgr = state[0], state[3], state[4]
    used, partial = mgr[g, M_USED], mgr[g, M_PARTIAL_SLOT]
    required = -(-slots // cfg[C_B])
    if cfg[C_TYPES + g] == MAMBA:
        spec, prev = cfg[C_SPEC_BLOCKS], used
        required = -(-main // cfg[C_B]) + spec
        if required <= used and partial < 0:
            mgr[g, M_ALLOCATED] = 1
            return
        if mgr[g, M_ALLOCATED]:
            mgr[g, M_LAST] = prev - 1 - spec
        elif prev > 0:
            mgr[g, M_LAST] = prev - 1
        skipped = required - spec - 1
        while used < skipped:
            req[TABLE, g, used] = 0
            used += 1
        for slot in range(prev - spec, prev):  # the speculative blocks move up
            if not mgr[g, M_ALLOCATED] or slot >= skipped:
                break
            req[TABLE, g, used], req[TABLE, g, slot] = req[TABLE, g, slot], 0
            used += 1
    if partial >= 0:
        source, copy = mgr[g, M_PARTIAL_SOURCE], pl.new_block(cfg, state)
        if cfg[C_TYPES + g] == MAMBA and mgr[g, M_ALLOCATED]:
            pl.move_hashes(source, copy, cfg, state)  # our own prompt-tail state moves
            held = source
        else:
            req[TABLE, g, partial] = copy
            held = copy
        if cfg[C_BOUNDED]:
            pool[REF, held] += 1  # until the copy has run (the step's end)
        mgr[g, M_COPY_SOURCE], mgr[g, M_COPY] = source, copy
        mgr[g, M_PARTIAL_SLOT] = -1
    while used < required:
        req[TABLE, g, used] = pl.new_block(cfg, state)
        used += 1
    mgr[g, M_USED] = used
    if cfg[C_TYPES + g] == MAMBA:
        mgr[g, M_ALLOCATED] = 1


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
        pl.free_list(scratch, count, cfg, state)
    if kind != MAMBA:
        return
    last = min((computed - 1) // B, used)
    if computed > 1 and mgr[g, M_RETIRED] < last:
        for i in range(last - 1, mgr[g, M_RETIRED] - 1, -1):
            if req[TABLE, g, i] != 0:
                scratch[count], req[TABLE, g, i] = req[TABLE, g, i], 0
                count += 1
        pl.free_list(scratch, count, cfg, state)
        mgr[g, M_RETIRED] = last
    slot = mgr[g, M_LAST]
    if 0 <= slot < -(-computed // B) - 1 and req[TABLE, g, slot] != 0:
        scratch[0], req[TABLE, g, slot] = req[TABLE, g, slot], 0
        pl.free_list(scratch, 1, cfg, state)


def free(cfg, state):  # pragma: no cover - compiled
    """The request finished: each group releases its table, tail first (Coordinator.free)."""
    req, mgr, scratch = state[3], state[4], state[5]
    for g in range(cfg[C_G]):
        count = 0
        for i in range(mgr[g, M_USED] - 1, -1, -1):
            scratch[count] = req[TABLE, g, i]
            count += 1
        pl.free_list(scratch, count, cfg, state)
        mgr[g, M_USED] = 0


# -- caching (Manager.cache, the prompt tails, cache_partial) -----------------------------------


def kept(g, i, P, junction, cfg):  # pragma: no cover - compiled
    """Whether slot i of group g may be hashed (the managers' `mask`): a Mamba state at a
    multiple of the retention interval or a boundary (P - 1, the junction); a window tail
    that ends at one."""
    retention, B, kind = cfg[C_RETENTION], cfg[C_B], cfg[C_TYPES + g]
    if kind == FA or retention < 0:
        return True
    per = retention // B
    if kind == MAMBA and retention and (per <= 1 or (i + 1) % per == 0):
        return True
    need = cfg[C_NEED] if kind == SWA else 1  # slots ending at a boundary, kept
    if kind == SWA and retention and (need >= per or i % per >= per - need):
        return True
    # coordinator.replay_boundaries: P - 1, or under the EAGLE drop one block below both a
    # resend's landing point and a longer sibling's
    first = max((P - 1) // B * B - B, 0) if cfg[C_DROP] else P - 1
    second = max(P // B * B - B, 0) if cfg[C_DROP] else P - 1
    for boundary in (first, second, junction):
        if boundary > 0 and boundary // B - need <= i < boundary // B:
            return True
    return False


def cache(g, hashes, plain, tokens, num_tokens, P, junction, cfg, state):  # pragma: no cover
    """Key group g's blocks that `tokens` filled since the last call (whose hashes exist:
    their lookahead tokens too), then its prompt tail. Full attention's entries carry their
    plain keys when there is a lookahead."""
    pool, keys, req, mgr, nodes = state[0], state[2], state[3], state[4], state[6]
    B, G, H, s = cfg[C_B], cfg[C_G], cfg[C_H], cfg[C_B] // cfg[C_H]
    shadows = cfg[C_LOOKAHEAD] > 0 and cfg[C_TYPES + g] == FA
    available = min((num_tokens - cfg[C_LOOKAHEAD]) // H, hashes.shape[0])
    full = min(tokens, available * H) // B
    start = mgr[g, M_CACHED]
    for i in range(start, full):
        b = req[TABLE, g, i]
        if b == 0 or not kept(g, i, P, junction, cfg):
            continue
        if pl.primary(b, pool, nodes) >= 0:
            pl.remove_hashes(b, cfg, state)  # a partial entry promoted to the full block
        key = hashes[(i + 1) * s - 1] * G + g
        shadow = plain[(i + 1) * s - 1] * G + g if shadows else -1
        pl.insert(key, b, (i + 1) * B, shadow, state)
        if cfg[C_TYPES + g] != FA:
            keys[EVER, key] = 1
    if start < full:
        mgr[g, M_CACHED] = full
        mgr[g, M_ACTIVE] = 1
    if cfg[C_TYPES + g] == MAMBA:
        state_tail(g, hashes, tokens, P, cfg, state)
    elif cfg[C_TYPES + g] == FA and s > 1:  # FullAttentionManager._cache_prompt_tail
        boundary = min((P - 1 + cfg[C_DROP]) // H, available) * H  # the drop: up to P
        slot = boundary // B
        if 0 < boundary <= tokens and boundary % B and slot < mgr[g, M_USED]:
            shadow = plain[boundary // H - 1] * G + g if shadows else -1
            cache_partial(g, hashes, req[TABLE, g, slot], boundary, shadow, cfg, state)


def state_tail(g, hashes, tokens, P, cfg, state):  # pragma: no cover - compiled
    """MambaManager._cache_prompt_tail: key the running state where a chunk ends at the
    prompt's last unit boundary inside a block; the next step copies it."""
    pool, req, mgr, nodes = state[0], state[3], state[4], state[6]
    B, H = cfg[C_B], cfg[C_H]
    if tokens <= 0 or tokens % H or tokens != checkpoint(P, H, cfg):
        return
    slot = -(-tokens // B) - 1
    if slot >= mgr[g, M_USED]:
        return
    source = req[TABLE, g, slot]
    if source == 0 or (pl.primary(source, pool, nodes) >= 0 and pool[TOKENS, source] == tokens):
        return
    if cache_partial(g, hashes, source, tokens, -1, cfg, state) >= 0 and tokens % B:
        mgr[g, M_PARTIAL_SLOT], mgr[g, M_PARTIAL_SOURCE] = slot, source
        mgr[g, M_CACHED] = slot


def cache_partial(g, hashes, b, tokens, shadow, cfg, state):  # pragma: no cover - compiled
    """Key block b at the unit boundary `tokens` (Manager.cache_partial), with its plain
    `shadow` key (-1 none); the key, -1 for NULL."""
    pool, keys, nodes = state[0], state[2], state[6]
    if b == 0:
        return -1
    key = hashes[tokens // cfg[C_H] - 1] * cfg[C_G] + g
    first = pl.primary(b, pool, nodes)
    if first != key and not pl.holds(key, b, pool, nodes) and first != -1:
        if pool[TOKENS, b] < tokens:
            pl.remove_hashes(b, cfg, state)
    pl.insert(key, b, tokens, shadow, state)
    if cfg[C_TYPES + g] != FA:
        keys[EVER, key] = 1
    return key
