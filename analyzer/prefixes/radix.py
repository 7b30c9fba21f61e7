"""Exact longest shared prefixes by a compiled radix tree, for sequences held in memory.

The same answers as `matcher.ViewMatcher` (see its definitions of e/w and L/p), computed
the direct way: every view keeps one radix tree per namespace, and each request, in
arrival order, walks its inserted sequence down its tree and then hangs the rest of it
off the point where the walk stopped. Every edge is a slice of the sequence that created
it, named by (that request, first depth, last depth), so the tree holds no token; a
child is found by its parent and its first unit in one open-addressing table, with the
whole key stored, so no lookup can collide. An edge remembers the request that created
it, which is the earliest request holding any point on it (a split keeps the creator on
both halves): the walk's last point gives e and w, the point at the prompt's length
gives p. The work is the tokens compared, sum of e over requests, plus one lookup per
edge walked: a compiled loop (numba), so it runs where every sequence is in memory
already (the replay's L1/L2, a worker's partition), on the CPU. The vectorised matcher
does everything else: chunks read from the store, archives, the GPU.
"""

from __future__ import annotations

import os
import threading
from functools import cache

import numpy as np

from analyzer.prefixes.source import RequestMeta

# Below this many units the vectorised matcher takes less time than importing numba (half a
# second; the kernel compiles once, then loads from its cache), so small traces skip it.
COMPILED_MIN_UNITS = 1 << 20


_loading: list[threading.Thread] = []  # the thread load_early started, until joined


def load_early(dtype: np.dtype) -> None:
    """Import numba and load (or compile) the kernel for `dtype` sequences in a thread, so
    a caller that will match at least COMPILED_MIN_UNITS units reads them meanwhile: the
    half second numba takes is then spent while DuckDB reads (its scans release the GIL)."""
    if _loading or _compiled.cache_info().currsize:
        return
    flat = np.zeros(1, dtype=dtype)

    def load() -> None:
        kernel = _compiled()
        if kernel is not None:  # one request of one unit: the signature the caller needs
            one, none = np.ones(1, np.int64), np.zeros(1, np.int64)
            out = [np.full(1, -1, np.int64) for _ in range(4)]
            kernel(flat, none, one, one, none, 1, *out)

    _loading.append(threading.Thread(target=load, name="hpa-numba"))
    _loading[0].start()


def _ready() -> None:
    """Wait for load_early's thread, if one runs: _compiled is not called twice at once,
    and no process forks while it holds the import lock (a forked worker would deadlock)."""
    while _loading:
        _loading.pop().join()


os.register_at_fork(before=_ready)


def radix_views(meta: RequestMeta, flat: np.ndarray, starts: np.ndarray):
    """Per view of `engine` ("any", "replica", "conversation"): (L, p, e, w) per request
    in units, -1 where a request is not in the view (p and w: -1 where nothing is
    shared); None without numba. Request i's inserted sequence is
    flat[starts[i] : starts[i] + meta.insert_len[i]]; `flat` is int32 or int64."""
    _ready()
    kernel = _compiled()
    if kernel is None:  # pragma: no cover - numba is a dependency
        return None
    lens = meta.insert_len.astype(np.int64, copy=False)
    qlen = np.minimum(meta.query_len, lens).astype(np.int64)
    starts = starts.astype(np.int64, copy=False)
    out = {}
    for name, ns in (
        ("any", meta.ns_any),
        ("replica", meta.ns_replica),
        ("conversation", meta.ns_conversation),
    ):
        if name == "replica" and np.array_equal(ns, meta.ns_any):
            out[name] = out["any"]
            continue
        got = tuple(np.full(meta.n, -1, dtype=np.int64) for _ in range(4))
        num_ns = int(ns.max()) + 1 if meta.n else 0
        if num_ns > 0:
            kernel(flat, starts, lens, qlen, ns.astype(np.int64), num_ns, *got)
        out[name] = got
    return out


def _walk_all(
    flat, starts, lens, qlen, ns, num_ns, q_shared, q_parent, e_out, w_out
):  # pragma: no cover
    """Walk then insert every request of one view (see the module doc)."""
    n = ns.shape[0]
    max_nodes = num_ns + 2 * n + 1
    lo = np.zeros(max_nodes, dtype=np.int64)  # an edge covers depths (lo, hi]
    hi = np.zeros(max_nodes, dtype=np.int64)
    seq = np.zeros(max_nodes, dtype=np.int64)  # the request whose units label it
    creator = np.full(max_nodes, -1, dtype=np.int64)
    cap = 1
    while cap < 2 * max_nodes:
        cap *= 2
    t_node = np.full(cap, -1, dtype=np.int64)
    t_unit = np.zeros(cap, dtype=np.int64)
    t_child = np.zeros(cap, dtype=np.int64)
    num_nodes = num_ns  # nodes 0..num_ns-1 are the roots, depth 0
    for j in range(n):
        if ns[j] < 0:
            continue
        start, length = starts[j], lens[j]
        node, d, holder, q_holder = ns[j], 0, -1, -1
        while d < length:
            unit = np.int64(flat[start + d])
            slot = _find(t_node, t_unit, node, unit, cap)
            if t_node[slot] < 0:  # nothing earlier continues here: j's rest is a new leaf
                num_nodes = _add(lo, hi, seq, creator, num_nodes, d, length, j)
                _put(t_node, t_unit, t_child, slot, node, unit, num_nodes - 1)
                break
            child = t_child[slot]
            base = starts[seq[child]]
            m = d + 1
            stop = min(hi[child], length)
            while m < stop and flat[base + m] == flat[start + m]:
                m += 1
            holder = creator[child]
            if d < qlen[j] <= m:
                q_holder = holder
            if m == hi[child]:
                node, d = child, m
                continue
            d = m
            if m < length:  # j branches off inside the edge: split it at m
                num_nodes = _add(lo, hi, seq, creator, num_nodes, lo[child], m, seq[child])
                mid = num_nodes - 1
                creator[mid] = creator[child]
                t_child[slot] = mid
                lo[child] = m
                _link(t_node, t_unit, t_child, cap, mid, np.int64(flat[base + m]), child)
                num_nodes = _add(lo, hi, seq, creator, num_nodes, m, length, j)
                _link(t_node, t_unit, t_child, cap, mid, np.int64(flat[start + m]), num_nodes - 1)
            break
        shared = min(d, qlen[j])
        e_out[j], q_shared[j] = d, shared
        w_out[j] = holder if d > 0 else -1
        q_parent[j] = (holder if shared == d else q_holder) if shared > 0 else -1


def _add(lo, hi, seq, creator, num_nodes, a, b, owner):  # pragma: no cover - compiled
    lo[num_nodes], hi[num_nodes], seq[num_nodes], creator[num_nodes] = a, b, owner, owner
    return num_nodes + 1


def _find(t_node, t_unit, node, unit, cap):  # pragma: no cover - compiled
    """The slot of (node, unit), or the empty slot where it would go (linear probing)."""
    h = (np.uint64(node) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(unit)
    h = (h ^ (h >> np.uint64(31))) * np.uint64(0xBF58476D1CE4E5B9)
    slot = np.int64(h >> np.uint64(33)) & (cap - 1)
    while t_node[slot] >= 0 and (t_node[slot] != node or t_unit[slot] != unit):
        slot = (slot + 1) & (cap - 1)
    return slot


def _put(t_node, t_unit, t_child, slot, node, unit, child):  # pragma: no cover - compiled
    t_node[slot], t_unit[slot], t_child[slot] = node, unit, child


def _link(t_node, t_unit, t_child, cap, node, unit, child):  # pragma: no cover - compiled
    """Make `child` the child of `node` under `unit` (a new key)."""
    _put(t_node, t_unit, t_child, _find(t_node, t_unit, node, unit, cap), node, unit, child)


@cache
def _compiled():
    """The compiled kernel, or None without numba (imported on first use, as in
    `traces.token_scan`)."""
    global _add, _find, _link, _put
    try:
        from numba import njit
    except ImportError:  # pragma: no cover - numba is a dependency
        return None
    _add = njit(cache=True, nogil=True)(_add)
    _find = njit(cache=True, nogil=True)(_find)
    _put = njit(cache=True, nogil=True)(_put)
    _link = njit(cache=True, nogil=True)(_link)
    return njit(cache=True, nogil=True)(_walk_all)
