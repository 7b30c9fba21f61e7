"""`hpa match`: match every request, find the junctions, write the `prefix_matches` and
`junctions` tables (optionally derived prompt families), export.

In this process (`--executor local`) the matcher streams every request's tokens once out
of the store (`access.token_stream`) through the compiled radix tree on the CPU, then
reads the junction owners' again to name the junctions; where the rows are stored far out
of arrival order it holds them all instead (`DuckDBSource.holds_better`); on the GPU it
reads them chunk by chunk; with another executor it runs sharded by each
request's first K tokens (`analyzer.prefixes.shallow`, run by `analyzer.access.sharded`),
with identical tables. The figures are defined in
`analyzer.prefixes.result`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from analyzer.access.inputs import RequestInput, request_input
from analyzer.access.sources import DuckDBSource
from analyzer.errors import ConfigError
from analyzer.executors import ExecutorSpec, as_spec
from analyzer.prefixes.backend import backend_name, get_xp
from analyzer.prefixes.engine import MatchOptions
from analyzer.prefixes.labels import junction_ids
from analyzer.prefixes.radix import available as radix_available
from analyzer.prefixes.result import (
    PrefixResult,
    compute,
    match_rows,
    node_rows,
    nodes_table,
    path_rows,
    to_tokens,
)
from analyzer.prefixes.source import RequestMeta, take_sequences
from analyzer.store.caveats import cut_caveat
from analyzer.store.db import open_to_store, trace_fingerprint
from analyzer.store.export import check_export_path
from analyzer.store.matches import write_relations
from analyzer.store.sequences import read_prefixes
from analyzer.words import plural

DEFAULT_MIN_FAMILY_TOKENS = 32


@dataclass(frozen=True)
class MatchSummary:
    """What one `hpa match` run did; `lines()` is what the CLI prints."""

    num_requests: int
    prompt_tokens: int
    shared_any_tokens: int
    shared_replica_tokens: int
    num_junctions: int
    backend: str
    match_seconds: float
    exact_fallbacks: int
    num_derived: int | None = None
    num_families: int | None = None
    out: str | None = None
    largest_family: tuple[str, int] | None = None  # (derived label, its requests)
    min_family_tokens: int = DEFAULT_MIN_FAMILY_TOKENS
    cleared: bool = False  # the families of an earlier derivation were removed
    notes: tuple[str, ...] = ()  # what the figures are read with (store.caveats)

    def _one_family_hint(self) -> str | None:
        """When one derived family holds nearly every request (a system prompt all share),
        how to split them: start families past that shared junction."""
        if self.largest_family is None or not self.num_derived:
            return None
        label, n = self.largest_family
        if n < 0.9 * self.num_derived or not label.startswith("j"):
            return None
        position = int(label[1:].split("-", 1)[0])
        return (
            f"note: {label} labels {n:,} of the {self.num_derived:,} requests: they share "
            f"their first {position:,} tokens (>= --min-family-tokens "
            f"{self.min_family_tokens}); --min-family-tokens {position + 1} labels them by "
            f"the next junction on their prompts (--clear-derived-families undoes labels)"
        )

    @property
    def tokens_per_s(self) -> float:
        return self.prompt_tokens / self.match_seconds if self.match_seconds > 0 else 0.0

    def lines(self) -> list[str]:
        share = self.shared_any_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        rep = self.shared_replica_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        out = [
            f"matched {plural(self.num_requests, 'request')} "
            f"({plural(self.prompt_tokens, 'prompt token')}) "
            f"in {self.match_seconds:.2f} s: {self.tokens_per_s:,.0f} tokens/s on {self.backend}",
            f"shared with any earlier request: {share:.1%} of prompt tokens; "
            f"on the same replica: {rep:.1%}",
            f"junctions: {self.num_junctions:,}; wrote tables prefix_matches, junctions",
        ]
        if self.cleared:
            out.append("removed the prompt families an earlier --derive-families wrote")
        if self.num_derived is not None:
            out.append(
                f"derived prompt families: {plural(self.num_families, 'label')} on "
                f"{plural(self.num_derived, 'request')} (source derived:first_junction)"
            )
            hint = self._one_family_hint()
            if hint:
                out.append(hint)
        if self.exact_fallbacks:
            out.append(f"hash collisions resolved by exact comparison: {self.exact_fallbacks:,}")
        if self.out:
            out.append(f"exported prefix_matches to {self.out}")
        out.extend(f"note: {note}" for note in self.notes)
        return out


def _path_said(path: str, xp, meta: RequestMeta, threshold: int) -> str:
    """The matcher that ran, in one word as `python -m analyzer.kernels` says it: the C
    radix trees, or the vectorised matcher of the backend (numpy: with why, where the C
    loop is built but the trace is below its threshold)."""
    if path != "numpy" or xp is not np or not radix_available():
        return path or backend_name(xp)
    if int(meta.insert_len.sum()) < threshold:
        return f"numpy (a trace under {threshold:,} units skips the C radix trees)"
    return path


def _sharded_said(path: str, parts: int, executor: str, threshold: int) -> str:
    """The matchers a sharded match's partitions ran and how many partitions, on which
    executor: 'the C radix trees, 5 partitions on executor processes', or where they
    differ 'numpy in 4 and the C radix trees in 1 of 5 partitions ...'; numpy, where the C
    loop is built, with why (as `_path_said`)."""
    joined = " of" if " in " in path else ","
    said = f"{path}{joined} {parts} partitions on executor {executor}"
    if "numpy" in path and radix_available():
        said += f" (a partition under {threshold:,} units skips the C radix trees)"
    return said


def match_prefixes(
    db_path: str | Path,
    *,
    backend: str = "auto",
    out: str | Path | None = None,
    derive_families: bool = False,
    min_family_tokens: int = DEFAULT_MIN_FAMILY_TOKENS,
    clear_derived_families: bool = False,
    options: MatchOptions | None = None,
    executor: ExecutorSpec | str | None = None,
    dataset: str | Path | None = None,
) -> MatchSummary:
    """Run the prefix matcher on the requests at `db_path` (or of a Parquet `dataset`,
    see `analyzer.store.dataset`) and write its tables to `db_path`.

    `executor` (local, processes, ray; see analyzer.executors) runs the matcher sharded by
    each request's first K tokens (`ExecutorSpec.shard_tokens`), with identical tables.

    Raises:
        ConfigError: unknown backend, executor or `out` suffix.
        BackendUnavailable: `backend='cupy'` cannot be used here, or ray is not installed.
        StoreError: no database, no requests, or requests without arrival order.
        WorkerError: a partition failed (named in the message).
    """
    if out is not None:
        check_export_path(out)
    spec = as_spec(executor)
    source = request_input(db_path, dataset)
    if source.is_dataset and (derive_families or clear_derived_families):
        raise ConfigError(
            "--derive-families writes requests.prompt_family, which a --dataset cannot hold; "
            "ingest the trace with `hpa ingest` to derive families"
        )
    if not spec.is_local and backend == "cupy":
        raise ConfigError("--backend cupy runs in one process; use it with --executor local")
    xp = get_xp(backend) if spec.is_local and backend != "auto" else np
    options = options or MatchOptions()
    # The store's own trace is read on a read-only connection (`hpa query` reads the store
    # while this matches); the tables are written on a writable one, opened to store them.
    con = source.connect()
    read_from = None if source.is_dataset else trace_fingerprint(con)[0]
    try:
        cut = cut_caveat(con)  # prompts a server log may have cut: shares are a lower bound
        started = time.perf_counter()
        sequences = DuckDBSource(con)
        meta = sequences.meta
        if spec.is_local and backend == "auto":  # a GPU where measured faster at this size
            xp = get_xp(backend, units=int(meta.insert_len.sum()))
        if spec.is_local:
            # on the CPU: streamed once through the radix trees (>= 1 M units; fewer, and
            # on the GPU: the vectorised matcher, chunks as read), or held where rows are
            # stored far out of arrival order (a stream would keep them early)
            held = sequences.held() if xp is np and sequences.holds_better() else None
            result = compute(held or sequences, xp=xp, options=options)
            relations = _relations(meta, result, _junction_nodes(meta, result, held, sequences))
            name = _path_said(result.arrays.path, xp, meta, options.compiled_min_units)
        else:
            con, result = _sharded(con, source, meta, spec, options)
            relations = _relations(
                meta, result, nodes_table(meta, result.junctions, result.junction_ids)
            )
            name = _sharded_said(
                result.arrays.path, result.num_partitions, spec.name, options.compiled_min_units
            )
        seconds = time.perf_counter() - started
        if not source.is_dataset:
            con = open_to_store(db_path, read_from, reader=con)
        derived = write_relations(
            con,
            relations,
            derive_families,
            min_family_tokens,
            source.fingerprint,
            clear_derived=clear_derived_families,
            out=out,
        )
    finally:
        con.close()
    summary = _summary(meta, result, name, seconds, derived, out)
    notes = (cut,) if cut else ()
    return replace(
        summary, min_family_tokens=min_family_tokens, cleared=clear_derived_families, notes=notes
    )


def _sharded(con, source: RequestInput, meta: RequestMeta, spec: ExecutorSpec, options):
    """(connection, merged result): the driver reads the first K units, workers read and
    match their partitions; the store's connection is closed while workers read it."""
    from analyzer.access.sharded import match_sharded  # the executors' (not a local match's)

    prefixes = read_prefixes(con, spec.shard_tokens)
    source.hand_over(con)
    result = match_sharded(meta, prefixes, source.workers, spec, options, options.progress)
    return source.take_back(con), result


def _junction_nodes(meta: RequestMeta, result: PrefixResult, held, sequences) -> pa.Table:
    """Relation match_junction_nodes. The junction ids hash each owner's sequence up to its
    deepest junction: rebuilt that far from the radix trees' arena (25.5 M tokens, 1,000
    owners: 0.10 s -> 0.02 s, against whole sequences widened to int64), else taken from
    the held sequences, else read again."""
    arena = result.arrays.sequences
    if held is not None or arena is None:
        return node_rows(held or sequences.held(np.unique(result.junctions.owner)), result)
    j = result.junctions
    owners, at = np.unique(j.owner, return_inverse=True)
    need = np.zeros(len(owners), dtype=np.int64)
    np.maximum.at(need, at, j.depth.astype(np.int64))
    flat, offsets = arena.prefixes(owners, need)

    def fetch(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cut, cut_offsets = take_sequences(flat, offsets, np.searchsorted(owners, ids))
        return cut.astype(np.int64).view(np.uint64), cut_offsets  # as the prefix hash takes

    ids = junction_ids(j.owner, j.depth, meta.ns_any[j.owner], meta.namespaces, fetch)
    return nodes_table(meta, j, ids)


def _relations(meta: RequestMeta, result, nodes) -> dict:
    return {
        "match_rows": match_rows(meta, result.arrays),
        "match_junction_nodes": nodes,
        "match_junction_paths": path_rows(meta, result),
    }


def _summary(
    meta: RequestMeta, result: PrefixResult, backend: str, seconds: float, derived, out
) -> MatchSummary:
    """What the CLI prints of one match: totals in tokens, junctions, families, timing."""
    arrays = result.arrays
    return MatchSummary(
        num_requests=meta.n,
        prompt_tokens=int(meta.prompt_tokens.sum()),
        shared_any_tokens=int(to_tokens(arrays.shared_any, meta).sum()),
        shared_replica_tokens=int(to_tokens(arrays.shared_replica, meta).sum()),
        num_junctions=int(result.junctions.owner.size),
        backend=backend,
        match_seconds=seconds,
        exact_fallbacks=arrays.exact_fallbacks,
        num_derived=derived[0] if derived else None,
        num_families=derived[1] if derived else None,
        largest_family=derived[2] if derived else None,
        out=str(out) if out is not None else None,
    )
