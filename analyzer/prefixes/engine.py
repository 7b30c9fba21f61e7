"""Runs the views of the prefix matcher over a source, chunk by chunk in arrival order.

Three views share each chunk read: `any` (namespace = kind, block size, cache_salt, LoRA),
`replica` (+ replica) and `conversation` (+ conversation_id; requests without one are left
out). A view whose namespaces are the `any` ones (no replicas in the trace) is not run
twice. Chunk size changes memory use only, never a result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analyzer.errors import StoreError
from analyzer.prefixes.backend import backend_name, to_numpy
from analyzer.prefixes.exact import ExactPath
from analyzer.prefixes.matcher import ChunkView, ViewMatcher
from analyzer.prefixes.prefix_hash import DEFAULT_HASH, ChunkHash, HashParams, PowerTables
from analyzer.prefixes.radix import (
    COMPILED_MIN_UNITS,
    ArenaSequences,
    RadixMatch,
    available,
    radix_views,
)
from analyzer.prefixes.source import (
    Archive,
    Chunk,
    PartitionSource,
    RequestMeta,
    SequenceSource,
    gather,
)

# How a summary names the compiled radix trees' path: the C loop `python -m analyzer.kernels`
# reports built ("radix trees: C (built)").
MATCHED_BY_RADIX = "the C radix trees"
DEFAULT_CHUNK_TOKENS = 1 << 22
DEFAULT_ARCHIVE_TOKENS = 1 << 26


@dataclass(frozen=True, kw_only=True)
class MatchOptions:
    """How to run (never what is computed): chunking, archive size, hash constants."""

    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    chunk_requests: int | None = None
    archive_tokens: int = DEFAULT_ARCHIVE_TOKENS
    hash_params: HashParams = DEFAULT_HASH
    # Sources holding every sequence in memory, with at least this many units, are matched
    # by the compiled radix tree (`radix`) when xp is NumPy: same answers, a fraction of
    # the time.
    compiled_min_units: int = COMPILED_MIN_UNITS
    # Which vectorised matcher answers where the radix tree does not: "auto" (the sort
    # matcher on CuPy, the chunked one elsewhere), "sort" or "chunked" (`MATCHERS`).
    matcher: str = "auto"
    # The sort matcher splits each view's sort into this many key ranges (a power of two;
    # 0: as many as the device's free memory needs).
    sort_passes: int = 0
    # Called as progress(requests done, total) after each chunk; never changes a result.
    progress: Callable[[int, int], None] | None = field(default=None, compare=False)


MATCHERS = ("auto", "sort", "chunked")


@dataclass
class MatchArrays:
    """Per request (arrival order), in units (tokens, or blocks for hash-id traces).

    `shared_conversation` is -1 for requests without a conversation; parents are request
    indices (arrival_seq) or -1. `insert_*` describe the inserted sequences (any view)."""

    shared_any: np.ndarray
    parent: np.ndarray
    shared_replica: np.ndarray
    shared_conversation: np.ndarray
    insert_shared: np.ndarray
    insert_parent: np.ndarray
    exact_fallbacks: int
    archive_rereads: int
    # Streamed through the radix trees: what rebuilds any request's inserted sequence
    # from their arena (`held(ids)`), so nothing is read twice. None otherwise.
    sequences: ArenaSequences | None = None
    # The matcher that ran: MATCHED_BY_RADIX (the compiled radix trees), else the backend's
    # vectorised one (numpy, cupy); "" where partitions were merged.
    path: str = ""


@dataclass
class _View:
    name: str
    ns: np.ndarray
    matcher: ViewMatcher
    exact: ExactPath
    shared: np.ndarray
    insert_shared: np.ndarray | None = None
    insert_parent: np.ndarray | None = None
    parent: np.ndarray | None = None


def chunk_bounds(insert_len: np.ndarray, options: MatchOptions) -> list[tuple[int, int]]:
    """Consecutive [start, stop) request ranges of about `chunk_tokens` units each
    (or exactly `chunk_requests` requests when that is set)."""
    n = int(insert_len.shape[0])
    if options.chunk_requests is not None:
        step = max(1, options.chunk_requests)
        return [(a, min(a + step, n)) for a in range(0, n, step)]
    ends = np.cumsum(insert_len)
    cuts = (
        np.searchsorted(
            ends,
            np.arange(1, int(ends[-1]) // options.chunk_tokens + 1) * options.chunk_tokens,
            side="right",
        )
        if n
        else np.zeros(0, int)
    )
    edges = np.unique(np.concatenate([[0], np.minimum(cuts, n), [n]]))
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def run_matcher(source: SequenceSource, *, xp: Any, options: MatchOptions) -> MatchArrays:
    """Match every request of `source` (see `matcher` for the definitions)."""
    meta = source.meta
    compiled = _compiled_match(source, xp=xp, options=options)
    if compiled is not None:
        return compiled
    if _takes_sort(xp, options):
        return _sort_arrays(source, xp=xp, options=options)
    archive = Archive(source, options.archive_tokens)
    views = _make_views(meta, archive, options, xp=xp)
    tables = PowerTables(options.hash_params, xp=xp)
    for start, stop in chunk_bounds(meta.insert_len, options):
        chunk = source.read(start, stop)
        _check_chunk(chunk, meta)
        archive.add(chunk)
        flat = xp.asarray(chunk.flat.astype(np.int64, copy=False).view(np.uint64))
        hasher = ChunkHash(flat, tables, xp=xp)
        for view in views:
            _run_view(view, chunk, flat, hasher, meta, archive, xp=xp)
        if options.progress:
            options.progress(stop, meta.n)
    arrays = _collect(views, meta, archive)
    arrays.path = backend_name(xp)
    return arrays


def _compiled_match(source: SequenceSource, *, xp: Any, options: MatchOptions):
    """The radix tree's answers where it applies (see MatchOptions), else None: over the
    sequences where the source holds them all, else streamed by a source that can
    (`radix_stream()`: it reads each sequence once, in arrival order, into the trees)."""
    meta = source.meta
    if xp is not np or not available() or int(meta.insert_len.sum()) < options.compiled_min_units:
        return None
    stream = getattr(source, "radix_stream", None)
    if getattr(source, "holds_all", False):
        arrays = _radix_arrays(radix_views(meta, source.flat, source.starts))
    elif stream is not None:
        arrays = stream()
    else:
        return None
    if options.progress:
        options.progress(meta.n, meta.n)
    return arrays


def _takes_sort(xp: Any, options: MatchOptions) -> bool:
    if options.matcher not in MATCHERS:
        raise ValueError(f"unknown matcher {options.matcher!r}; known: {', '.join(MATCHERS)}")
    if options.matcher == "auto":
        return backend_name(xp) == "cupy"
    return options.matcher == "sort"


def _sort_arrays(source: SequenceSource, *, xp: Any, options: MatchOptions) -> MatchArrays:
    """The sort matcher's answers (`sort_match`) over every sequence, read once: held
    where the source holds them, else in one read (`held()`, or one chunk)."""
    from analyzer.prefixes import sort_device  # the CPU's radix path never loads it
    from analyzer.prefixes.sort_match import MATCHED_BY_SORT

    meta = source.meta
    warming = sort_device.warm_up() if backend_name(xp) == "cupy" else None
    if getattr(source, "holds_all", False):
        held = source
    elif hasattr(source, "held"):
        held = source.held(allocate=sort_device.host_allocator(xp))  # CUDA starts meanwhile
    else:
        chunk = source.read(0, meta.n)
        held = PartitionSource(meta, chunk.flat, chunk.offsets)
    if warming is not None:
        warming.join()
    views = sort_device.match_held(meta, held.flat, held.starts, xp=xp, options=options)
    if options.progress:
        options.progress(meta.n, meta.n)
    any_view = views["any"]
    conversation = views.get("conversation")
    return MatchArrays(
        shared_any=any_view.L,
        parent=any_view.p,
        shared_replica=views.get("replica", any_view).L,
        shared_conversation=conversation.L if conversation else np.full(meta.n, -1, np.int64),
        insert_shared=any_view.e,
        insert_parent=any_view.w,
        exact_fallbacks=sum(v.fallbacks for v in views.values()),
        archive_rereads=0,
        sequences=HeldSequences(held),
        path=f"{MATCHED_BY_SORT} ({backend_name(xp)})",
    )


@dataclass(frozen=True)
class HeldSequences:
    """The junction owners' sequences from the held read, as `radix.ArenaSequences` gives
    them from the trees' arena: nothing is read twice."""

    source: Any

    def prefixes(self, ids: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(flat, int64 offsets): the first `lens[k]` units (at most its length) of request
        `ids[k]`'s inserted sequence, one after another."""
        ids = np.asarray(ids, dtype=np.int64)
        lens = np.minimum(np.asarray(lens, dtype=np.int64), self.source.meta.insert_len[ids])
        return gather(self.source.flat, np.asarray(self.source.starts)[ids], lens)


def match_stream(
    meta: RequestMeta,
    chunks: Iterable[tuple[int, int, np.ndarray, np.ndarray]],
    dtype: np.dtype,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> MatchArrays:
    """Every view's answers for sequences that stream by in arrival order, each chunk
    (first, stop, flat, starts) held only while it is matched: request i (first <= i <
    stop) is flat[starts[i - first] :][: meta.insert_len[i]], `dtype` values. The radix
    tree keeps what it needs of them (`radix.RadixMatch`); answers as `run_matcher`'s."""
    match = RadixMatch(meta, dtype)
    done = 0
    for first, stop, flat, starts in chunks:
        if first != done:
            raise ValueError(f"chunk of requests {first}..{stop} after {done}: not in order")
        match.feed(flat, starts, first, stop)
        done = stop
        if progress:
            progress(done, meta.n)
    if done != meta.n:
        raise ValueError(f"the chunks held {done} of {meta.n} requests")
    return _radix_arrays(match.views(), match.sequences())


def _radix_arrays(views: dict, sequences: ArenaSequences | None = None) -> MatchArrays:
    q_any, p_any, e_any, w_any = views["any"]
    return MatchArrays(
        shared_any=q_any,
        parent=p_any,
        shared_replica=views["replica"][0],
        shared_conversation=views["conversation"][0],
        insert_shared=e_any,
        insert_parent=w_any,
        exact_fallbacks=0,
        archive_rereads=0,
        sequences=sequences,
        path=MATCHED_BY_RADIX,
    )


def _make_views(meta: RequestMeta, archive: Archive, options: MatchOptions, *, xp) -> list[_View]:
    specs = [("any", meta.ns_any, True, False)]
    if meta.n and meta.ns_replica.max() != meta.ns_any.max():
        specs.append(("replica", meta.ns_replica, False, False))
    if meta.n and meta.ns_conversation.max() >= 0:
        specs.append(("conversation", meta.ns_conversation, False, True))
    views = []
    for name, ns, want_parent, prune in specs:
        exact = ExactPath(ns, meta.insert_len, archive.fetch)
        matcher = ViewMatcher(
            ns_all=xp.asarray(ns),
            insert_len_all=xp.asarray(meta.insert_len),
            exact=exact,
            params=options.hash_params,
            want_parent=want_parent,
            ns_last=xp.asarray(_last_per_namespace(ns)) if prune else None,
            xp=xp,
        )
        views.append(_View(name, ns, matcher, exact, np.full(meta.n, -1, dtype=np.int64)))
    views[0].insert_shared = np.zeros(meta.n, dtype=np.int64)
    views[0].insert_parent = np.full(meta.n, -1, dtype=np.int64)
    views[0].parent = np.full(meta.n, -1, dtype=np.int64)
    return views


def _last_per_namespace(ns: np.ndarray) -> np.ndarray:
    last = np.full(int(ns.max()) + 1, -1, dtype=np.int64)
    inside = np.flatnonzero(ns >= 0)
    np.maximum.at(last, ns[inside], inside)
    return last


def _check_chunk(chunk: Chunk, meta: RequestMeta) -> None:
    lens = np.diff(chunk.offsets)
    if lens.shape[0] != chunk.stop - chunk.start or not np.array_equal(
        lens, meta.insert_len[chunk.start : chunk.stop]
    ):
        raise StoreError("requests changed while `hpa match` was reading them; run it again")


def _run_view(
    view: _View, chunk: Chunk, flat, hasher: ChunkHash, meta: RequestMeta, archive: Archive, *, xp
) -> None:
    ns = view.ns[chunk.start : chunk.stop]
    rows = np.flatnonzero(ns >= 0)
    if rows.size == 0:
        return
    ids = rows + chunk.start
    v = ChunkView(
        flat=flat,
        hasher=hasher,
        starts=xp.asarray(chunk.offsets[rows]),
        lens=xp.asarray(meta.insert_len[ids]),
        qlens=xp.asarray(meta.query_len[ids]),
        ids=xp.asarray(ids),
        ns=xp.asarray(ns[rows]),
        first_id=chunk.start,
    )
    result = view.matcher.process(v, archive.fetch, chunk.stop)
    view.shared[ids] = to_numpy(result.query_shared)
    if view.parent is not None:
        view.parent[ids] = to_numpy(result.query_parent)
        view.insert_shared[ids] = to_numpy(result.insert_shared)
        view.insert_parent[ids] = to_numpy(result.insert_parent)


def _collect(views: list[_View], meta: RequestMeta, archive: Archive) -> MatchArrays:
    by_name = {v.name: v for v in views}
    any_view = by_name["any"]
    replica = by_name.get("replica", any_view).shared
    conversation = (
        by_name["conversation"].shared
        if "conversation" in by_name
        else np.full(meta.n, -1, dtype=np.int64)
    )
    return MatchArrays(
        shared_any=any_view.shared,
        parent=any_view.parent,
        shared_replica=replica,
        shared_conversation=conversation,
        insert_shared=any_view.insert_shared,
        insert_parent=any_view.insert_parent,
        exact_fallbacks=sum(v.exact.calls for v in views),
        archive_rereads=archive.num_reread,
    )
