"""The replay's L1/L2: each request's longest prefix shared with any earlier request of
its cache namespace (L1), and with one of the same model revision and replica (L2).

An earlier request offers the tokens whose KV it computed: its prompt and its output but
the last output token, which is sampled and never fed back (so never cached). With a
non-local executor the matcher runs sharded by each request's first K tokens
(`analyzer.executors.shallow`), with identical answers.
"""

from __future__ import annotations

import numpy as np

from analyzer.executors import LOCAL, ExecutorSpec
from analyzer.prefixes.engine import MatchArrays, MatchOptions, run_matcher
from analyzer.prefixes.memory import MemorySource
from analyzer.prefixes.source import RequestMeta


def shared_prefixes(
    trace, ns: list[tuple], partitions: list[tuple], spec: ExecutorSpec = LOCAL
) -> tuple[np.ndarray, np.ndarray]:
    """(L1, L2) in tokens per request (arrival order) of a loaded trace (`replay._Trace`)
    or a dataset (`executors.replay.LazyTrace`); `ns`: cache namespaces, `partitions`:
    (model revision, replica) per request."""
    from analyzer.executors.replay import LazyTrace, lazy_shared_prefixes

    ns_any = _dense(ns)
    ns_replica = _dense([(a, b) for a, b in zip(ns, partitions, strict=True)])
    if isinstance(trace, LazyTrace):
        return _to_tokens(lazy_shared_prefixes(trace, ns_any, ns_replica, spec), trace)
    meta, flat, offsets = _inserted(trace, ns_any, ns_replica)
    if spec.is_local:
        found = run_matcher(MemorySource(meta, flat, offsets), xp=np, options=MatchOptions())
    else:  # sharded by the first K tokens: identical answers (analyzer.executors.shallow)
        from analyzer.executors.match import shared_units

        found = shared_units(meta, flat, offsets, spec)
    return _to_tokens(found, trace)


def _inserted(trace, ns_any: np.ndarray, ns_replica: np.ndarray):
    """(meta, flat, offsets) of the sequences whose KV each request leaves behind."""
    lens_q = np.asarray([len(p) for p in trace.prompts], dtype=np.int64)
    inserted = [
        p
        if trace.columns["block_size"][i] is not None or trace.outputs[i] is None
        else np.concatenate([p, trace.outputs[i][:-1]])
        for i, p in enumerate(trace.prompts)
    ]
    lens_i = np.asarray([len(s) for s in inserted], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens_i)]).astype(np.int64)
    flat = np.concatenate(inserted).astype(np.int64) if inserted else np.zeros(0, np.int64)
    block = np.asarray([b or 0 for b in trace.columns["block_size"]], dtype=np.int64)
    meta = RequestMeta(
        ns_any=ns_any,
        ns_replica=ns_replica,
        ns_conversation=np.full(trace.n, -1, dtype=np.int64),
        query_len=lens_q,
        insert_len=lens_i,
        block_size=block,
        prompt_tokens=np.asarray(trace.columns["prompt_tokens"], dtype=np.int64),
    )
    return meta, flat, offsets


def _to_tokens(found: MatchArrays, trace) -> tuple[np.ndarray, np.ndarray]:
    """Matched units -> tokens (hash-id blocks x block size, capped at the prompt)."""
    block = np.asarray([b or 0 for b in trace.columns["block_size"]], dtype=np.int64)
    prompt_tokens = np.asarray(trace.columns["prompt_tokens"], dtype=np.int64)
    unit = np.where(block > 0, block, 1)
    return (
        np.minimum(found.shared_any * unit, prompt_tokens),
        np.minimum(found.shared_replica * unit, prompt_tokens),
    )


def _dense(keys: list) -> np.ndarray:
    ids: dict = {}
    return np.asarray([ids.setdefault(k, len(ids)) for k in keys], dtype=np.int64)
