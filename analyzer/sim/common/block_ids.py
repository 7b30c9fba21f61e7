"""Chained block ids of token-id requests by a compiled loop: `hashing.HashInterner`'s ids
(equal exactly when the namespace and the token prefix up to the block's end are equal),
computed for many requests in one call.

A block's key is (its parent's id, its B token ids); a table maps keys to ids by open
addressing on a 64-bit mix of the key, and every hit on the mix is checked against the
block's tokens kept in an arena (each distinct block once), so two different prefixes never
share an id. Ids come from the HashInterner's own counter, so they never collide with the
ids it gives out itself (hash-id requests, namespace roots). Blocks past a request's known
tokens (decode outputs given as a count) get fresh ids, as `BlockHashes.extend` gives them.

Per block: one mix of B tokens, a probe, a comparison of B tokens: about 3 us for the 125
blocks of a 2,000-token prompt at B = 16, against about 16 us in the interpreter.
"""

from __future__ import annotations

import weakref
from functools import cache

import numpy as np

from analyzer.pages import plain_empty
from analyzer.sim.common.block_hash import HashInterner

ARENA_UNITS = 1 << 26
# Arenas of finished CompiledBlockIds, their pages mapped already: a process that replays
# again (a sweep's points, a plan's probes) starts on them instead of faulting in fresh
# pages (11,000 faults, 50 ms, for 20 M tokens). At most two are kept.
_SPARE_ARENAS: list[np.ndarray] = []


class CompiledBlockIds:
    """Block ids of `block`-token blocks, drawn from `interner`'s counter."""

    def __init__(self, interner: HashInterner, block: int) -> None:
        self.interner = interner
        self.block = block
        # the first block of each run: per slot (one row, one cache line) its parent id
        # (-1: empty), mix and id
        self.table = np.full((1 << 12, 3), -1, np.int64)
        # runs: first id (ascending), where its blocks' tokens start in the arena, length
        self.runs = np.zeros((1 << 10, 3), np.int64)
        # 256 MiB of address space, written (resident) only as far as runs fill it: growing
        # it copies what it holds into pages touched for the first time
        self.arena = _SPARE_ARENAS.pop() if _SPARE_ARENAS else plain_empty(ARENA_UNITS, np.int32)
        self._first_arena = [self.arena]  # handed on when this instance goes, if not grown
        weakref.finalize(self, _spare, self._first_arena)
        # next id, keys in the table, runs, arena units used
        self.state = np.zeros(4, np.int64)
        # one odd 64-bit weight per position of a block: the mix is a weighted sum, whose
        # products do not wait on each other (a chained mix took 1 us a 544-token block)
        weights = np.random.default_rng(0x5EED).integers(0, 1 << 62, block, dtype=np.int64)
        self.weights = (weights.astype(np.uint64) << np.uint64(1)) | np.uint64(1)

    def ids(
        self, tokens: np.ndarray, starts: np.ndarray, known: np.ndarray, total: np.ndarray,
        roots: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """(ids, offsets): request r's first total[r] block ids are ids[offsets[r] :
        offsets[r + 1]]; its blocks k < known[r] hold tokens[starts[r] + k * B :][: B]
        (int32), the rest are fresh; roots[r] is its namespace's root id."""
        offsets = np.zeros(len(total) + 1, np.int64)
        np.cumsum(total, out=offsets[1:])
        out = np.empty(int(offsets[-1]), np.int64)
        starts, known = starts.astype(np.int64), known.astype(np.int64)
        kernel, rehash = _compiled()
        self.state[0] = self.interner.next_id
        done = 0
        while done < len(total):  # the loop stops where a table or the arena is full
            done = kernel(
                tokens, starts, known, offsets, roots, self.weights, done, self.table,
                self.runs, self.arena, self.state, out,
            )  # fmt: skip
            if done < len(total):
                self._grow(int(known[done]), rehash)
        self.interner.next_id = int(self.state[0])
        return out, offsets

    def _grow(self, blocks: int, rehash) -> None:
        """Room for one more request of `blocks` known blocks (every table doubled as
        needed): a key and a run more, the arena its tokens."""
        _, keys, runs, used = (int(v) for v in self.state)
        if 2 * (keys + 1) > len(self.table):
            table = np.full((2 * len(self.table), 3), -1, np.int64)
            rehash(self.table, table)
            self.table = table
        if runs + 1 > len(self.runs):
            self.runs = np.concatenate([self.runs, np.zeros_like(self.runs)])
        if used + blocks * self.block > len(self.arena):
            arena = plain_empty(max(used + blocks * self.block, 2 * len(self.arena)), np.int32)
            arena[:used] = self.arena[:used]
            self.arena = arena
            self._first_arena[0] = None  # its pages go with it


def _spare(first_arena: list) -> None:
    if first_arena[0] is not None and len(_SPARE_ARENAS) < 2:
        _SPARE_ARENAS.append(first_arena[0])


# -- the compiled loops (numba) -----------------------------------------------------------------


def _ids(
    tokens, starts, known, offsets, roots, weights, first, table, runs, arena, state, out
):  # pragma: no cover - compiled  # fmt: skip
    """Requests from `first` on; -> the first one not done (a table or the arena is full).

    As `hashing.BlockHashes._walk`: a block continues its parent's run (id parent + 1) when
    the run's next block holds its tokens; else the table names the run that (parent,
    tokens) starts; else its blocks to the request's last known one start a new run."""
    next_id, num_keys, num_runs, used = state[0], state[1], state[2], state[3]
    B = weights.shape[0]
    r = first
    while r < known.shape[0]:
        n = known[r]
        if 2 * (num_keys + 1) > table.shape[0] or num_runs + 1 > runs.shape[0]:
            break
        if used + n * B > arena.shape[0]:
            break
        parent, base, row = roots[r], starts[r], offsets[r]
        k = 0
        while k < n:
            at = base + k * B
            child = _in_run(parent, tokens, at, B, runs, num_runs, arena)
            mix = -1
            if child < 0:
                mix = _mix(parent, tokens, at, weights)
                child = _lookup(parent, mix, tokens, at, B, table, runs, num_runs, arena)
            if child < 0:  # nobody had this prefix: blocks k..n-1 start a run
                _insert(parent, mix, next_id, table)
                runs[num_runs, 0], runs[num_runs, 1], runs[num_runs, 2] = next_id, used, n - k
                arena[used : used + (n - k) * B] = tokens[at : base + n * B]
                num_keys, num_runs, used = num_keys + 1, num_runs + 1, used + (n - k) * B
                for j in range(k, n):
                    out[row + j] = next_id + j - k
                next_id += n - k
                k = n
                break
            out[row + k] = child
            parent = child
            k += 1
        for j in range(n, offsets[r + 1] - row):  # tokens nobody else can produce
            out[row + j] = next_id
            next_id += 1
        r += 1
    state[0], state[1], state[2], state[3] = next_id, num_keys, num_runs, used
    return r


def _run_of(block_id, runs, num_runs):  # pragma: no cover - compiled
    """The run holding `block_id`, or -1 (a root, a fresh id, another interner's)."""
    lo, hi = 0, num_runs
    while lo < hi:
        mid = (lo + hi) // 2
        if runs[mid, 0] <= block_id:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0 or block_id >= runs[lo - 1, 0] + runs[lo - 1, 2]:
        return -1
    return lo - 1


def _same(tokens, at, arena, held, B):  # pragma: no cover - compiled
    for j in range(B):
        if arena[held + j] != tokens[at + j]:
            return False
    return True


def _in_run(parent, tokens, at, B, runs, num_runs, arena):  # pragma: no cover - compiled
    """parent + 1 if it continues parent's run with these tokens, else -1."""
    run = _run_of(parent, runs, num_runs)
    if run < 0 or parent + 1 >= runs[run, 0] + runs[run, 2]:
        return -1
    held = runs[run, 1] + (parent + 1 - runs[run, 0]) * B
    return parent + 1 if _same(tokens, at, arena, held, B) else -1


def _lookup(parent, mix, tokens, at, B, table, runs, num_runs, arena):  # pragma: no cover
    """The id of the run (parent, these tokens) starts, or -1."""
    mask = table.shape[0] - 1
    slot = mix & mask
    while table[slot, 0] >= 0:
        if table[slot, 0] == parent and table[slot, 1] == mix:
            child = table[slot, 2]
            held = runs[_run_of(child, runs, num_runs), 1]
            if _same(tokens, at, arena, held, B):
                return child
        slot = (slot + 1) & mask
    return -1


def _insert(parent, mix, child, table):  # pragma: no cover - compiled
    mask = table.shape[0] - 1
    slot = mix & mask
    while table[slot, 0] >= 0:
        slot = (slot + 1) & mask
    table[slot, 0], table[slot, 1], table[slot, 2] = parent, mix, child


def _mix(parent, tokens, at, weights):  # pragma: no cover - compiled
    """A 63-bit mix of (parent, a block's tokens): where a key's probe starts (checked,
    never trusted). A weighted sum (vectorised), then scrambled with the parent."""
    acc = np.uint64(0)
    for j in range(weights.shape[0]):
        acc += np.uint64(np.uint32(tokens[at + j])) * weights[j]
    h = (acc ^ (np.uint64(parent) * np.uint64(0x9E3779B97F4A7C15))) * np.uint64(0xBF58476D1CE4E5B9)
    return np.int64((h ^ (h >> np.uint64(31))) >> np.uint64(1))


def _rehash(old, new):  # pragma: no cover - compiled
    """Every key of table `old` into the (larger, empty) table `new`."""
    for s in range(old.shape[0]):
        if old[s, 0] >= 0:
            _insert(old[s, 0], old[s, 1], old[s, 2], new)


@cache
def _compiled():
    global _in_run, _insert, _lookup, _mix, _run_of, _same
    from numba import njit

    jit = njit(cache=True, nogil=True)
    _mix, _same, _run_of, _insert = jit(_mix), jit(_same), jit(_run_of), jit(_insert)
    _in_run, _lookup = jit(_in_run), jit(_lookup)
    rehash = jit(_rehash)
    small = np.full((2, 3), -1, np.int64)
    rehash(small, small.copy())  # loaded now, not at the first table that fills
    return jit(_ids), rehash


class LookaheadIds:
    """Block ids whose key also holds the `lookahead` tokens after the block (EAGLE:
    `hashing.BlockHashes`' `look`), from the plain ids: two blocks with their lookahead
    are equal exactly when their prefixes are (equal plain ids) and the tokens after them
    are, so an id is interned per (plain id, next tokens), one probe a block instead of
    another pass over every token. Drawn from `interner`'s counter like the plain ones."""

    def __init__(self, interner: HashInterner, block: int, lookahead: int) -> None:
        self.interner = interner
        self.block = block
        self.lookahead = lookahead
        # per slot: the plain id (-1: empty), the lookahead tokens, the id
        self.table = np.full((1 << 12, lookahead + 2), -1, np.int64)
        self.used = 0

    def ids(
        self, plain: np.ndarray, offsets: np.ndarray, tokens: np.ndarray, starts: np.ndarray,
        known: np.ndarray,
    ) -> np.ndarray:  # fmt: skip
        """Request r's ids, at `offsets` as its plain ids in `plain`: its blocks k <
        known[r] (those whose lookahead tokens exist) by their plain id and
        tokens[starts[r] + (k + 1) * B :][: lookahead]; the rest fresh."""
        blocks = int((known * (known > 0)).sum())
        if 2 * (self.used + blocks) > len(self.table):
            size = len(self.table)
            while 2 * (self.used + blocks) > size:
                size *= 2
            table = np.full((size, self.lookahead + 2), -1, np.int64)
            _compiled_lookahead()[1](self.table, table)
            self.table = table
        out = np.empty(len(plain), np.int64)
        state = np.asarray([self.interner.next_id, self.used], np.int64)
        _compiled_lookahead()[0](
            plain, offsets, tokens, starts.astype(np.int64), known.astype(np.int64),
            self.block, self.table, state, out,
        )  # fmt: skip
        self.interner.next_id, self.used = int(state[0]), int(state[1])
        return out


def _lookahead_ids(plain, offsets, tokens, starts, known, B, table, state, out):  # pragma: no cover  # noqa: E501
    """LookaheadIds.ids over every request (the table has room for every known block)."""
    next_id, used = state[0], state[1]
    L = table.shape[1] - 2
    for r in range(offsets.shape[0] - 1):
        row = offsets[r]
        for k in range(offsets[r + 1] - row):
            if k >= known[r]:  # tokens nobody else can produce
                out[row + k], next_id = next_id, next_id + 1
                continue
            at = starts[r] + (k + 1) * B
            found = _probe(plain[row + k], tokens, at, L, table)
            if table[found, 0] < 0:
                table[found, 0], table[found, L + 1] = plain[row + k], next_id
                for j in range(L):
                    table[found, 1 + j] = tokens[at + j]
                next_id, used = next_id + 1, used + 1
            out[row + k] = table[found, L + 1]
    state[0], state[1] = next_id, used


def _probe(parent, tokens, at, L, table):  # pragma: no cover - compiled
    """The slot holding (parent, tokens[at : at + L]), or the empty one where it goes."""
    mask = table.shape[0] - 1
    h = np.uint64(parent) * np.uint64(0x9E3779B97F4A7C15)
    for j in range(L):
        h = (h ^ np.uint64(np.uint32(tokens[at + j]))) * np.uint64(0xBF58476D1CE4E5B9)
    slot = np.int64((h ^ (h >> np.uint64(29))) >> np.uint64(1)) & mask
    while table[slot, 0] >= 0:
        same = table[slot, 0] == parent
        for j in range(L):
            same = same and table[slot, 1 + j] == tokens[at + j]
        if same:
            return slot
        slot = (slot + 1) & mask
    return slot


def _rehash_lookahead(old, new):  # pragma: no cover - compiled
    """Every entry of `old` into the (larger, empty) `new`, probed by its key."""
    L = old.shape[1] - 2
    key = np.empty(max(L, 1), np.int32)
    for s in range(old.shape[0]):
        if old[s, 0] >= 0:
            for j in range(L):
                key[j] = old[s, 1 + j]
            new[_probe(old[s, 0], key, 0, L, new)] = old[s]


@cache
def _compiled_lookahead():
    global _probe
    from numba import njit

    jit = njit(cache=True, nogil=True)
    _probe = jit(_probe)
    rehash = jit(_rehash_lookahead)
    small = np.full((2, 3), -1, np.int64)
    rehash(small, small.copy())  # loaded now, not at the first table that fills
    return jit(_lookahead_ids), rehash
