"""Exact longest shared prefixes by a compiled radix tree, over sequences held in memory or
streamed through it in arrival order.

The same answers as `matcher.ViewMatcher` (see its definitions of e/w and L/p), computed
the direct way: every view keeps one radix tree per namespace, and each request, in
arrival order, walks its inserted sequence down its tree and then hangs the rest of it
off the point where the walk stopped. An edge is a run of units named by where they are
(a base, first depth, last depth): in the held array, so the tree holds no unit, or, when
the sequences stream by and are dropped, in the trees' arena, which keeps each request's
units from its shallowest new leaf on, once for every view (about the trace's unique
content). A child is found by its parent and its first unit in one open-addressing table,
with the whole key stored, so no lookup can collide. An edge remembers the request that
created it, which is the earliest request holding any point on it (a split keeps the
creator on both halves): the walk's last point gives e and w, the point at the prompt's
length gives p. The work is the tokens compared, sum of e over requests, plus one lookup
per edge walked: a compiled loop (numba) on the CPU. The vectorised matcher does the
rest: chunks read from the store by `hpa match`, archives, the GPU.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from analyzer.prefixes.source import RequestMeta
from analyzer.warmup import Warmup

# Below this many units the vectorised matcher takes less time than importing numba (half a
# second; the kernel compiles once, then loads from its cache), so small traces skip it.
COMPILED_MIN_UNITS = 1 << 20


_loading = Warmup("hpa-numba")  # load_early's thread, until waited for


def load_early(dtype: np.dtype) -> None:
    """Import numba and load (or compile) the kernel for `dtype` sequences in a thread, so
    a caller that will match at least COMPILED_MIN_UNITS units reads them meanwhile: the
    half second numba takes is then spent while DuckDB reads (its scans release the GIL)."""
    if _compiled.cache_info().currsize:
        return

    _loading.start(lambda: warm(dtype))


def warm(dtype: np.dtype) -> None:
    """Load (or compile) the kernel for `dtype` sequences: one request of one unit, with
    the argument types callers pass."""
    if _compiled() is not None:
        ones = np.ones(1, np.int64)
        meta = RequestMeta(ones, ones, ones, ones, ones, ones * 0, ones)
        RadixMatch(meta, np.dtype(dtype)).run(_compiled(), np.zeros(1, dtype), ones * 0, 0, 1)


def _ready() -> None:
    """Wait for load_early's thread, if one runs: _compiled is not called twice at once."""
    _loading.wait()


VIEWS = ("any", "replica", "conversation")


class RadixMatch:
    """The radix trees of every view of `meta`, fed its requests in arrival order: all at
    once where every sequence is held (`held`: the array `feed` is given, which the trees'
    edges then point into), or chunk by chunk as they stream (the trees then keep their
    own copy of each unit no earlier request had: an arena about the trace's unique
    content, every view's edges pointing into it). Answers never depend on the chunks.

    Memory: about 130 bytes a request a view (nodes and the child table), plus the arena
    (`dtype` units; virtual until written) when nothing is held."""

    def __init__(self, meta: RequestMeta, dtype: np.dtype, *, held: np.ndarray | None = None):
        n = meta.n
        self.n = n
        self.alias_replica = bool(np.array_equal(meta.ns_replica, meta.ns_any))
        wanted = {
            "any": meta.ns_any,
            "replica": meta.ns_replica,
            "conversation": meta.ns_conversation,
        }
        self.names = [
            name
            for name in VIEWS
            if n and wanted[name].max() >= 0 and not (name == "replica" and self.alias_replica)
        ]
        num_views = len(self.names)
        self.ns = np.zeros((num_views, n), dtype=np.int64)
        for v, name in enumerate(self.names):
            self.ns[v] = wanted[name]
        num_ns = self.ns.max(axis=1) + 1 if n else np.zeros(0, np.int64)
        # copies (a request's int64), writable, as every other argument: a read-only array
        # is another numba type, a kernel the wheel does not carry (analyzer.kernels)
        self.lens = np.array(meta.insert_len, dtype=np.int64)
        self.qlen = np.minimum(meta.query_len, self.lens).astype(np.int64)
        max_nodes = int(num_ns.max(initial=0)) + 2 * n + 1
        cap = 1
        while cap < 2 * max_nodes:
            cap *= 2
        shape = (num_views, max_nodes)
        self.nodes = (  # per node: lo, hi (an edge holds units [lo, hi)), base, creator
            np.zeros(shape, np.int64),
            np.zeros(shape, np.int64),
            np.zeros(shape, np.int64),
            np.full(shape, -1, np.int64),
        )
        self.table = (  # open addressing: (parent node, first unit) -> child node
            np.full((num_views, cap), -1, np.int64),
            np.zeros((num_views, cap), np.int64),
            np.zeros((num_views, cap), np.int64),
        )
        # nodes used per view (roots 0..num_ns-1 first), then the arena's used units
        self.counts = np.append(num_ns, 0).astype(np.int64)
        self.own = held is None
        self.arena = np.empty(int(self.lens.sum()), dtype) if held is None else held
        self.out = np.full((4, num_views, n), -1, np.int64)  # L, p, e, w per view

    def feed(self, flat: np.ndarray, starts: np.ndarray, first: int, stop: int) -> None:
        """Requests [first, stop): request i's inserted sequence is flat[starts[i - first]
        :][: insert_len[i]] (`flat` is the held array itself when one is held)."""
        _ready()
        self.run(_compiled(), flat, starts, first, stop)

    def run(self, kernel, flat: np.ndarray, starts: np.ndarray, first: int, stop: int) -> None:
        """`feed` with `kernel` (load_early's thread: the kernel it is loading)."""
        if not self.names or stop <= first:
            return
        # read-only, always: numba compiles (or loads) one kernel per array type, and a
        # read-only array (DuckDB's Arrow batches) is another type than a writable one
        # (0.2 s the first time either comes)
        flat = flat.view()
        flat.flags.writeable = False
        kernel(
            flat,
            np.array(starts, dtype=np.int64),
            first,
            stop,
            self.lens,
            self.qlen,
            self.ns,
            *self.nodes,
            *self.table,
            self.counts,
            self.arena,
            self.arena if self.own else self.arena[:0].copy(),  # written to; `held` may not be
            self.own,
            *self.out,
        )

    def views(self) -> dict[str, tuple[np.ndarray, ...]]:
        """Per view: (L, p, e, w) per request in units, -1 where a request is not in the
        view (p and w: -1 where nothing is shared)."""
        none = tuple(np.full(self.n, -1, np.int64) for _ in range(4))
        out = {name: tuple(self.out[:, v]) for v, name in enumerate(self.names)}
        if self.alias_replica and "any" in out:
            out["replica"] = out["any"]
        return {name: out.get(name, none) for name in VIEWS}


def radix_views(meta: RequestMeta, flat: np.ndarray, starts: np.ndarray):
    """Per view of `engine` ("any", "replica", "conversation"): (L, p, e, w) per request
    in units, -1 where a request is not in the view (p and w: -1 where nothing is
    shared); None without numba. Request i's inserted sequence is
    flat[starts[i] : starts[i] + meta.insert_len[i]]; `flat` is int32 or int64."""
    _ready()
    if _compiled() is None:  # pragma: no cover - numba is a dependency
        return None
    match = RadixMatch(meta, flat.dtype, held=flat)
    match.feed(flat, starts, 0, meta.n)
    return match.views()


def _feed(
    flat, starts, first, stop, lens, qlen, ns, lo, hi, base, creator, t_node, t_unit, t_child,
    counts, arena, store, own, q_shared, q_parent, e_out, w_out,
):  # pragma: no cover - compiled  # fmt: skip
    """Walk then insert requests [first, stop) into every view (see the module doc)."""
    num_views = ns.shape[0]
    cap = t_node.shape[1]
    pend_node = np.full(num_views, -1, np.int64)  # where each view hangs the rest of j
    pend_d = np.zeros(num_views, np.int64)
    pend_slot = np.full(num_views, -1, np.int64)  # its free table slot, if found already
    for j in range(first, stop):
        start, length = starts[j - first], lens[j]
        rest = length  # the shallowest depth a view hangs a new leaf at
        for v in range(num_views):
            pend_node[v] = -1
            if ns[v, j] < 0:
                continue
            d = _walk(
                flat, start, length, qlen[j], ns[v, j], v, j, lo, hi, base, creator,
                t_node, t_unit, t_child, counts, arena, cap, pend_node, pend_d, pend_slot,
                q_shared, q_parent, e_out, w_out,
            )  # fmt: skip
            if pend_node[v] >= 0:
                rest = min(rest, d)
        if rest == length:
            continue
        leaf_base = start
        if own:  # the arena keeps j's units from the shallowest new leaf on
            used = counts[num_views]
            store[used : used + length - rest] = flat[start + rest : start + length]
            leaf_base = used - rest
            counts[num_views] = used + length - rest
        for v in range(num_views):
            node = pend_node[v]
            if node < 0:
                continue
            d = pend_d[v]
            leaf = counts[v]
            counts[v] = leaf + 1
            lo[v, leaf], hi[v, leaf], base[v, leaf], creator[v, leaf] = d, length, leaf_base, j
            unit = np.int64(flat[start + d])
            if pend_slot[v] >= 0:
                _put(t_node[v], t_unit[v], t_child[v], pend_slot[v], node, unit, leaf)
            else:
                _link(t_node[v], t_unit[v], t_child[v], cap, node, unit, leaf)


def _walk(
    flat, start, length, qlen, root, v, j, lo, hi, base, creator, t_node, t_unit, t_child,
    counts, arena, cap, pend_node, pend_d, pend_slot, q_shared, q_parent, e_out, w_out,
):  # pragma: no cover - compiled  # fmt: skip
    """Request j down view v's tree: its answers, a split where it branches inside an
    edge, and where its new leaf goes (pend_*; none when all of it was there). -> depth."""
    node, d, holder, q_holder = root, 0, -1, -1
    while d < length:
        unit = np.int64(flat[start + d])
        slot = _find(t_node[v], t_unit[v], node, unit, cap)
        if t_node[v, slot] < 0:  # nothing earlier continues here: j's rest is a new leaf
            pend_node[v], pend_d[v], pend_slot[v] = node, d, slot
            break
        child = t_child[v, slot]
        b = base[v, child]
        m = d + 1
        end = min(hi[v, child], length)
        while m < end and arena[b + m] == flat[start + m]:
            m += 1
        holder = creator[v, child]
        if d < qlen <= m:
            q_holder = holder
        if m == hi[v, child]:
            node, d = child, m
            continue
        d = m
        if m < length:  # j branches off inside the edge: split it at m
            mid = counts[v]
            counts[v] = mid + 1
            lo[v, mid], hi[v, mid], base[v, mid] = lo[v, child], m, b
            creator[v, mid] = creator[v, child]
            t_child[v, slot] = mid
            lo[v, child] = m
            _link(t_node[v], t_unit[v], t_child[v], cap, mid, np.int64(arena[b + m]), child)
            pend_node[v], pend_d[v], pend_slot[v] = mid, m, -1
        break
    shared = min(d, qlen)
    e_out[v, j], q_shared[v, j] = d, shared
    w_out[v, j] = holder if d > 0 else -1
    q_parent[v, j] = (holder if shared == d else q_holder) if shared > 0 else -1
    return d


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
    global _find, _link, _put, _walk
    try:
        from numba import njit
    except ImportError:  # pragma: no cover - numba is a dependency
        return None
    _walk = njit(cache=True, nogil=True)(_walk)
    _find = njit(cache=True, nogil=True)(_find)
    _put = njit(cache=True, nogil=True)(_put)
    _link = njit(cache=True, nogil=True)(_link)
    return njit(cache=True, nogil=True)(_feed)
