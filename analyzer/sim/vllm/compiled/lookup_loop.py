"""The lookup of the compiled hybrid loop (hybrid_loop.py): coordinator.Coordinator.lookup
and the managers' `longest_hit`, over the arrays of loop_fields.py. Every function here
runs compiled (numba). A probe asks one of the keys' rows: HOLDER (cached now), EVER
(ever cached: the hit had nothing been evicted), EVICTED (cached or evicted: the attention
match had nothing been evicted), SHADOWS (some entry's plain key: EAGLE's diagnostic)."""

from __future__ import annotations

from analyzer.sim.vllm.compiled import pool_loop as pl
from analyzer.sim.vllm.compiled.loop_fields import (
    C_B,
    C_DROP,
    C_FINE,
    C_G,
    C_H,
    C_HYBRID,
    C_LOOKAHEAD,
    C_NEED,
    C_NFA,
    C_NSWA,
    EVER,
    EVICTED,
    HIT,
    HOLDER,
    SHADOWS,
)


def held(h, g0, g1, cfg, state, probe):  # pragma: no cover - compiled
    """Whether hash id h is cached in every group g0 .. g1 - 1; `probe` EVER: ever cached,
    EVICTED: cached or evicted, SHADOWS: some entry's plain key."""
    keys, G = state[2], cfg[C_G]
    for g in range(g0, g1):
        k = h * G + g
        if probe == SHADOWS:
            if keys[SHADOWS, k] == 0:
                return False
        elif keys[HOLDER, k] < 0 and (probe == HOLDER or keys[probe, k] == 0):
            return False
    return True


def hit_row(h, slot, g0, g1, cfg, state):  # pragma: no cover - compiled
    """req[HIT, g, slot] = the oldest block holding h, for groups g0 .. g1 - 1."""
    for g in range(g0, g1):
        state[3][HIT, g, slot] = pl.holder(h * cfg[C_G] + g, state[2], state[6])


def hit_rows(hashes, first, last, g0, g1, cfg, state):  # pragma: no cover - compiled
    """req[HIT, g, :last]: NULL before `first`, then the blocks' oldest holders."""
    s = cfg[C_B] // cfg[C_H]
    for j in range(last):
        if j < first:
            state[3][HIT, g0:g1, j] = 0
        else:
            hit_row(hashes[(j + 1) * s - 1], j, g0, g1, cfg, state)


def full_hit(hashes, skip, limit, available, cfg, state, probe, rows):  # pragma: no cover
    """FullAttentionManager.longest_hit over hashes[skip:] (`available` of them), up to
    `limit` tokens: the leading run of blocks, then (sub-block hits) the first missing
    block's unit boundaries, highest first; their blocks in req[HIT] if `rows`."""
    B, H = cfg[C_B], cfg[C_H]
    s, g1 = B // H, cfg[C_NFA] if probe != EVICTED else 1
    count, run = min(limit // B, available // s), 0
    while run < count and held(hashes[skip + (run + 1) * s - 1], 0, g1, cfg, state, probe):
        run += 1
    if rows:
        hit_rows(hashes, 0, run, 0, g1, cfg, state)
    if not cfg[C_FINE]:
        return run * B
    first = run * s
    for f in range(min(first + s - 1, limit // H, available) - 1, first - 1, -1):
        if held(hashes[skip + f], 0, g1, cfg, state, probe):
            if rows:
                hit_row(hashes[skip + f], run, 0, g1, cfg, state)
            return (f + 1) * H
    return run * B


def attention_hit(hashes, P, cfg, state):  # pragma: no cover - compiled
    """Full attention's match (tokens), capped at P - 1, its blocks in req[HIT]
    (Coordinator._attention_hit). The legacy EAGLE drop matches one unit more (hybrid) and
    gives one back."""
    B, H = cfg[C_B], cfg[C_H]
    align, available = H if cfg[C_FINE] else B, (P - cfg[C_LOOKAHEAD]) // H
    limit = P - 1
    if cfg[C_DROP] and cfg[C_HYBRID]:  # vLLM's hybrid coordinator: copies count, unbounded
        limit = min(P - 1 + align, available * H)
    hit = full_hit(hashes, 0, limit, available, cfg, state, HOLDER, True)
    if cfg[C_DROP] and hit > 0:
        hit -= min(align, B)
    return hit - hit % align


def attention_match(seq, P, cfg, state, probe):  # pragma: no cover - compiled
    """reference.VllmReplay._attention_match: full attention's match without the drafter's
    effect (plain hashes, probed by the entries' SHADOWS; or, under the EAGLE drop, the
    hashes themselves), one unit past the cap, then capped and aligned."""
    H, align = cfg[C_H], cfg[C_H] if cfg[C_FINE] else cfg[C_B]
    limit = min(P - 1 + align, P // H * H)
    hit = min(full_hit(seq, 0, limit, P // H, cfg, state, probe, False), P - 1)
    return hit - hit % align


def cached_ever(hashes, P, resident, cfg, state):  # pragma: no cover - compiled
    """reference.VllmReplay._cached_ever: the attention match had nothing been evicted."""
    B, H = cfg[C_B], cfg[C_H]
    whole = resident // B
    skip = whole * (B // H)
    limit = min(P - 1, P // H * H) - whole * B
    hit = full_hit(hashes, skip, limit, P // H - skip, cfg, state, EVICTED, False)
    return max(hit + whole * B, resident)


def window_hit(hashes, cur, cfg, state, probe):  # pragma: no cover - compiled
    """SlidingWindowManager.longest_hit: the right-most run of `need` blocks ending <= cur,
    else the run from block 0."""
    B, g0, s = cfg[C_B], cfg[C_NFA], cfg[C_B] // cfg[C_H]
    g1 = g0 + cfg[C_NSWA]
    run = 0
    for i in range(cur // B - 1, -1, -1):
        if not held(hashes[(i + 1) * s - 1], g0, g1, cfg, state, probe):
            run = 0
            continue
        run += 1
        if run >= cfg[C_NEED]:
            if probe == HOLDER:
                hit_rows(hashes, i, i + run, g0, g1, cfg, state)
            return (i + run) * B
    if probe == HOLDER:
        hit_rows(hashes, 0, run, g0, g1, cfg, state)
    return run * B


def state_hit(hashes, cur, cfg, state, probe):  # pragma: no cover - compiled
    """MambaManager.longest_hit: the highest state at or below cur, at a block boundary
    (at any unit boundary with sub-block hits); rows before it NULL."""
    B, H, g0, G = cfg[C_B], cfg[C_H], cfg[C_NFA] + cfg[C_NSWA], cfg[C_G]
    s = B // H
    step = 1 if cfg[C_FINE] else s
    top = cur // H if cfg[C_FINE] else cur // B * s
    for f in range(top - 1, -1, -step):
        if held(hashes[f], g0, G, cfg, state, probe):
            if probe == HOLDER:
                state[3][HIT, g0:G, : f // s] = 0
                hit_row(hashes[f], f // s, g0, G, cfg, state)
            return (f + 1) * H
    return 0


def lookup(hashes, P, attention, cfg, state, use_ever):  # pragma: no cover - compiled
    """The hit: full attention's match, shrunk by the sparse types to a fixed point (one
    pass with exactly two types). `use_ever`: as if no sparse key had been evicted."""
    nswa, nm = cfg[C_NSWA], cfg[C_G] - cfg[C_NFA] - cfg[C_NSWA]
    probe = EVER if use_ever else HOLDER
    hit = P - 1
    while True:
        cur = min(hit, attention)
        if nswa:
            cur = window_hit(hashes, cur, cfg, state, probe)
        if nm:
            cur = state_hit(hashes, cur, cfg, state, probe)
        shrunk = cur < hit
        hit = cur
        if not shrunk or (nswa > 0) + (nm > 0) == 1:
            return hit
