"""The one-sort prefix matcher: every prefix of every request keyed, one stable sort per view.

The answers are the radix tree's (`radix.py`, `matcher.ViewMatcher` defines them): per
request j of a view, e = the longest prefix of its inserted sequence that an earlier
request of its namespace holds, w = the earliest request holding that much, L = min(e,
query length) and p = the earliest request holding L units. This matcher gets them with a
fixed number of whole-batch array steps, so a GPU runs it in a few dozen launches:

1. The key of every prefix (j, d), d = 1..len_j: `prefix_hash`'s polynomial key, which is
   the same on every backend (arithmetic mod 2^64).
2. One stable sort of the (key, request) pairs. The input lists requests in arrival order,
   so the first element of each run of equal keys (its head) is the earliest request whose
   prefix has that key.
3. A request's prefixes that no earlier request holds are exactly the heads it owns, so
   ê = len - (heads owned). ŵ and p̂ are the heads of the runs of its keys at depths ê and
   L̂ = min(ê, query length).
4. Verification, one token comparison per unit: ŵ is earlier, in the namespace, at least
   ê long and equal to j on ê units (and p̂ likewise on L̂). A prefix held earlier is never
   a head (equal prefixes have equal keys), so ê >= e; a verified ŵ holds ê units, so
   ê <= e. ŵ is the least request in the run of that key, which holds the true w, so ŵ <=
   w, and a verified holder is >= w. A request that fails (a collision fooled step 3) is
   recomputed by comparing tokens with every earlier request of its namespace: the answer
   is exact whatever the keys do; collisions only cost time.

`SortSteps` runs each step with plain `xp` calls (NumPy on the CPU, where it is the
reference the GPU code is tested against; or CuPy). `sort_device.FusedSteps` runs steps 1,
3 and 4 as a few compiled kernels (one CUDA module, or the same source built for the host
in tests). Batches larger than memory split the sort by key range (`passes`): every run of
equal keys falls in one pass, so the answers do not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from analyzer.prefixes.arrays import Array, prefixes_equal, run_starts, u64
from analyzer.prefixes.exact import common_prefix_lengths
from analyzer.prefixes.prefix_hash import DEFAULT_HASH, ChunkHash, HashParams, PowerTables
from analyzer.prefixes.source import RequestMeta, gather

# How a summary names this matcher's path.
MATCHED_BY_SORT = "the sort matcher"
# Elements keyed per step when a sort is split into passes (bounds the transient keys).
SLICE_UNITS = 1 << 24


@dataclass(frozen=True)
class ViewRows:
    """The requests of one view that have units, in arrival order (row r is request
    ids[r]), with where their units are and how the matcher walks them."""

    ids: Array  # int64 request ids
    starts: Array  # int64: row r's units are flat[starts[r] :][: lens[r]]
    lens: Array  # int64 units
    qlens: Array  # int64: min(query length, lens)
    ns: Array  # int64 namespace id
    elem_off: Array  # int64, rows + 1: the view's elements of row r are elem_off[r]..[r+1]
    m: int  # rows
    units: int  # elements, elem_off[-1] (kept on the host: no device read per use)


class Steps(Protocol):
    """The per-unit steps of one batch; `SortSteps` is the plain reference."""

    xp: Any

    def bind(self, rows: ViewRows) -> None:
        """Take the view that the calls below refer to."""

    def element_keys(self, lo: int, hi: int) -> tuple[Array, Array]:
        """(key, row) of the view's elements lo..hi-1 (row-major, depth 1 first)."""

    def keys_at(self, rows: Array, depths: Array) -> Array:
        """Keys of the prefixes (rows[k], depths[k]); depths >= 1."""

    def count_heads(self, sorted_keys: Array, sorted_rows: Array) -> Array:
        """Per row (int64): how many runs of equal keys it heads."""

    def mismatched(self, e_hat: Array, w_row: Array, l_hat: Array, p_row: Array) -> Array:
        """Per row (bool): its first e_hat units differ from row w_row's (or its first l_hat
        from p_row's); a row of -1 compares nothing. The holders are known to be long
        enough."""


class SortSteps:
    """Every step as whole-array `xp` calls (the reference, and the portable GPU path)."""

    def __init__(self, flat: Array, *, params: HashParams = DEFAULT_HASH, xp: Any) -> None:
        self.xp, self.flat = xp, flat
        wide = xp.astype(xp.astype(flat, xp.int64), xp.uint64)
        self.hasher = ChunkHash(wide, PowerTables(params, xp=xp), xp=xp)

    def bind(self, rows: ViewRows) -> None:
        self.rows = rows
        self.const = self.hasher.constants(rows.starts, rows.ns)

    def element_keys(self, lo: int, hi: int) -> tuple[Array, Array]:
        xp, rows = self.xp, self.rows
        index = xp.arange(lo, hi, dtype=xp.int64)
        row = xp.searchsorted(rows.elem_off, index, side="right") - 1
        depth = index - xp.take(rows.elem_off, row) + 1
        return self.keys_at(row, depth), row

    def keys_at(self, rows: Array, depths: Array) -> Array:
        pos = self.xp.take(self.rows.starts, rows) + depths - 1
        return self.hasher.keys(pos, self.xp.take(self.const, rows))

    def count_heads(self, sorted_keys: Array, sorted_rows: Array) -> Array:
        xp = self.xp
        owners = sorted_rows[run_starts(sorted_keys, xp=xp)]
        if hasattr(xp, "bincount"):
            return xp.astype(xp.bincount(owners, minlength=self.rows.m), xp.int64)
        owners = xp.sort(owners)  # the array API has no bincount
        edges = xp.searchsorted(owners, xp.arange(self.rows.m + 1, dtype=owners.dtype))
        return edges[1:] - edges[:-1]

    def mismatched(self, e_hat: Array, w_row: Array, l_hat: Array, p_row: Array) -> Array:
        xp, starts = self.xp, self.rows.starts
        bad = xp.zeros(self.rows.m, dtype=xp.bool)
        for holder, depth in ((w_row, e_hat), (p_row, l_hat)):
            depth = xp.where(holder >= 0, depth, 0)
            at = xp.take(starts, xp.where(holder >= 0, holder, 0))
            bad = bad | ~prefixes_equal(self.flat, at, self.flat, starts, depth, xp=xp)
        return bad


@dataclass(frozen=True)
class SortAnswers:
    """Per request of the batch (numpy int64, -1 outside the view): e, w, L, p."""

    e: np.ndarray
    w: np.ndarray
    L: np.ndarray
    p: np.ndarray
    fallbacks: int


def view_rows(meta: RequestMeta, ns: np.ndarray, starts: np.ndarray, *, xp: Any) -> ViewRows:
    """The rows of the view with namespaces `ns` (-1: not in it) that have units."""
    ids = np.flatnonzero((ns >= 0) & (meta.insert_len > 0))
    lens = meta.insert_len[ids].astype(np.int64)
    qlens = np.minimum(meta.query_len[ids], lens).astype(np.int64)
    off = np.zeros(ids.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    host = (ids, np.asarray(starts)[ids].astype(np.int64), lens, qlens, ns[ids].astype(np.int64))
    return ViewRows(
        *(xp.asarray(a) for a in host),
        elem_off=xp.asarray(off),
        m=int(ids.shape[0]),
        units=int(off[-1]),
    )


def match_view(
    steps: Steps,
    rows: ViewRows,
    meta: RequestMeta,
    ns: np.ndarray,
    host: tuple[np.ndarray, np.ndarray],
    *,
    passes: int = 1,
) -> SortAnswers:
    """e, w, L, p of every request of one view (`ns`), exact; `host` = (flat, starts) on
    the host, which the exact recomputation of a failed verification reads."""
    xp = steps.xp
    steps.bind(rows)
    heads = xp.zeros(rows.m, dtype=xp.int64)
    kept = None
    for part in range(passes):
        sorted_keys, sorted_rows = _sorted_pass(steps, rows, part, passes)
        heads = heads + steps.count_heads(sorted_keys, sorted_rows)
        kept = (sorted_keys, sorted_rows) if passes == 1 else None
    e_hat = rows.lens - heads
    l_hat = xp.minimum(e_hat, rows.qlens)
    w_row, p_row = _run_heads(steps, rows, [e_hat, l_hat], passes, kept)
    bad = _unproven(steps, rows, e_hat, w_row, l_hat, p_row)
    return _answers(meta, ns, rows, host, (e_hat, w_row, l_hat, p_row, bad))


def _sorted_pass(steps: Steps, rows: ViewRows, part: int, passes: int) -> tuple[Array, Array]:
    """The view's (key, row) pairs whose key falls in pass `part`, stably sorted by key."""
    xp = steps.xp
    if passes == 1:
        keys, row = steps.element_keys(0, rows.units)
    else:
        shift = u64(64 - (passes.bit_length() - 1), xp=xp)
        keys_parts, row_parts = [], []
        for lo in range(0, rows.units, SLICE_UNITS):
            keys, row = steps.element_keys(lo, min(lo + SLICE_UNITS, rows.units))
            keep = (keys >> shift) == u64(part, xp=xp)
            keys_parts.append(keys[keep])
            row_parts.append(row[keep])
        keys = xp.concat(keys_parts) if keys_parts else xp.zeros(0, dtype=xp.uint64)
        row = xp.concat(row_parts) if row_parts else xp.zeros(0, dtype=xp.int64)
    order = xp.argsort(keys, stable=True)
    return xp.take(keys, order), xp.take(row, order)


def _run_heads(steps: Steps, rows: ViewRows, depths: list, passes: int, kept) -> list:
    """Per depth array, per row: the row heading the run of its key at that depth (-1
    where the depth is 0). A split sort is sorted once more, for every lookup at once."""
    xp = steps.xp
    asked = [xp.nonzero(depth > 0)[0] for depth in depths]
    needles = [
        steps.keys_at(rows_asked, xp.take(depth, rows_asked))
        for rows_asked, depth in zip(asked, depths, strict=True)
    ]
    out = [xp.full(rows.m, -1, dtype=xp.int64) for _ in depths]
    if all(a.shape[0] == 0 for a in asked):
        return out
    shift = u64(64 - (passes.bit_length() - 1), xp=xp)
    for part in range(passes):
        sorted_keys, sorted_rows = kept or _sorted_pass(steps, rows, part, passes)
        for found, rows_asked, keys in zip(out, asked, needles, strict=True):
            mine = (
                xp.arange(keys.shape[0], dtype=xp.int64)
                if passes == 1
                else xp.nonzero((keys >> shift) == u64(part, xp=xp))[0]
            )
            # the run's first element: the key is there (the row's own element has it)
            at = xp.searchsorted(sorted_keys, xp.take(keys, mine))
            found[xp.take(rows_asked, mine)] = xp.take(sorted_rows, at)
    return out


def _unproven(steps: Steps, rows: ViewRows, e_hat, w_row, l_hat, p_row) -> Array:
    """Rows whose ŵ or p̂ is not an earlier holder of the same namespace, long enough and
    equal on the units claimed: the answers a collision may have fooled."""
    xp = steps.xp
    bad = xp.zeros(rows.m, dtype=xp.bool)
    index = xp.arange(rows.m, dtype=xp.int64)
    checked = []
    for holder, depth in ((w_row, e_hat), (p_row, l_hat)):
        safe = xp.where(holder >= 0, holder, 0)
        ok = (holder < index) & (xp.take(rows.ns, safe) == rows.ns)
        ok = ok & (xp.take(rows.lens, safe) >= depth)
        bad = bad | ((holder >= 0) & ~ok)
        checked.append(xp.where(ok, holder, -1))
    w_ok, p_ok = checked
    p_ok = xp.where(p_ok == w_ok, -1, p_ok)  # the same holder on fewer units: proven by ŵ's
    return bad | steps.mismatched(e_hat, w_ok, l_hat, p_ok)


def _answers(meta, ns, rows: ViewRows, host, found) -> SortAnswers:
    from analyzer.prefixes.backend import to_numpy

    e_hat, w_row, l_hat, p_row, bad = (to_numpy(a) for a in found)
    ids = to_numpy(rows.ids)
    n = meta.n
    out = {k: np.full(n, -1, dtype=np.int64) for k in ("e", "w", "L", "p")}
    inside = ns >= 0
    for k in ("e", "L"):
        out[k][inside] = 0  # in the view with no units: nothing shared
    out["e"][ids], out["L"][ids] = e_hat, l_hat
    out["w"][ids] = np.where(w_row >= 0, ids[np.maximum(w_row, 0)], -1)
    out["p"][ids] = np.where(p_row >= 0, ids[np.maximum(p_row, 0)], -1)
    failed = ids[bad]
    for j in failed.tolist():
        out["e"][j], out["w"][j], out["L"][j], out["p"][j] = exact_answer(meta, ns, host, j)
    return SortAnswers(**out, fallbacks=int(failed.shape[0]))


def exact_answer(
    meta: RequestMeta, ns: np.ndarray, host: tuple[np.ndarray, np.ndarray], j: int
) -> tuple[int, int, int, int]:
    """(e, w, L, p) of request j by comparing its units with every earlier request of its
    namespace: the definition, for the requests a collision fooled."""
    flat, starts = host
    lens = np.asarray(meta.insert_len, dtype=np.int64)
    seq = flat[int(starts[j]) :][: int(lens[j])]
    earlier = np.flatnonzero(ns[:j] == ns[j])
    if earlier.size == 0 or seq.size == 0:
        return 0, -1, 0, -1
    cand_flat, offsets = gather(flat, np.asarray(starts)[earlier], lens[earlier])
    lcp = common_prefix_lengths(cand_flat, offsets, seq)
    e = int(lcp.max())
    q = min(int(meta.query_len[j]), int(lens[j]), e)
    w = int(earlier[int(np.argmax(lcp >= e))]) if e else -1
    p = int(earlier[int(np.argmax(lcp >= q))]) if q else -1
    return e, w, q, p


def sort_match(
    meta: RequestMeta,
    flat: np.ndarray,
    starts: np.ndarray,
    *,
    xp: Any,
    params: HashParams = DEFAULT_HASH,
    steps: Steps | None = None,
    passes: int = 1,
) -> dict[str, SortAnswers]:
    """Per view ("any", and "replica" / "conversation" where the trace has them): the
    answers of every request. Request i's inserted sequence is flat[starts[i] :][:
    meta.insert_len[i]] (host int32 or int64); `steps` defaults to `SortSteps` over a
    copy of `flat` on `xp`; `passes` (a power of two) splits each sort by key range."""
    if passes < 1 or passes & (passes - 1):
        raise ValueError(f"passes must be a power of two, not {passes}")
    if steps is None:
        steps = SortSteps(xp.asarray(flat), params=params, xp=xp)
    host = (flat, np.asarray(starts, dtype=np.int64))
    views = {"any": meta.ns_any}
    if meta.n and meta.ns_replica.max() != meta.ns_any.max():
        views["replica"] = meta.ns_replica
    if meta.n and meta.ns_conversation.max() >= 0:
        views["conversation"] = meta.ns_conversation
    out = {}
    for name, ns in views.items():
        rows = view_rows(meta, ns, host[1], xp=xp)
        out[name] = match_view(steps, rows, meta, ns, host, passes=passes)
    return out
