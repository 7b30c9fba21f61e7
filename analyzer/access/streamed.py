"""A stored trace whose token ids stay in the store: the replay's driver holds the scalar
columns, and the L1/L2 matcher streams the token lists once, in arrival order, through the
radix trees (`access.token_stream`), which keep only the units no earlier request had
(their arena: the trace's unique content).

It serves the replays whose results follow from shared prefixes alone
(`sim.dispatch.replay_from_shared`: full attention, unbounded) on a token-id trace, in
this process: those need no token id after L1/L2. Holding the ids instead costs 4 bytes a
token; streamed, the peak is the arena plus one batch (70 M tokens, 20 % of them unique:
about 55 MiB of arena instead of 267 MiB of ids).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from analyzer.access.token_stream import ExpectedLists, stream_match
from analyzer.access.trace import LoadedTrace, load_trace, read_scalars, replay_meta
from analyzer.errors import StoreError
from analyzer.executors import ExecutorSpec
from analyzer.prefixes import radix
from analyzer.prefixes.radix import COMPILED_MIN_UNITS
from analyzer.sim.records import SimRequest
from analyzer.store.db import load_sql, require_tables

TOKEN_DTYPE = np.dtype(np.int32)  # token ids as stored (INTEGER[])


@dataclass
class StoredTrace:
    """The store's requests as the replay's driver holds them when it streams their token
    ids (see the module doc): every column but the ids (`columns`, as LoadedTrace's) and
    each request's prompt and output lengths in tokens."""

    columns: dict[str, list]
    con: duckdb.DuckDBPyConnection
    prompt_len: np.ndarray
    output_len: np.ndarray

    reads_in_worker = False
    prompts = None  # never held; prefix-aware routing, which reads them, loads the trace
    token_ids_only = True

    @property
    def n(self) -> int:
        return len(self.columns["request_id"])

    def sim_request(self, i: int, namespace: tuple) -> SimRequest:
        """Request `i` by its counts (the closed form reads no token id)."""
        c = self.columns
        return SimRequest(
            request_id=c["request_id"][i],
            prompt_tokens=int(self.prompt_len[i]),
            output_tokens=int(self.output_len[i]),
            namespace=namespace,
            timestamp_s=c["timestamp_s"][i],
        )

    def shared_units(self, ns_any: np.ndarray, ns_replica: np.ndarray, spec: ExecutorSpec):
        """L1/L2 in units (MatchArrays), the token lists streamed once (local only)."""
        if not spec.is_local:
            raise ValueError("a streamed trace is matched in this process")
        none = np.zeros(self.n, np.int64)
        lists = ExpectedLists(
            self.prompt_len, none, self.output_len, none.astype(bool), 1, TOKEN_DTYPE
        )
        meta = replay_meta(self.columns, ns_any, ns_replica, self.prompt_len, lists.insert_len)
        return stream_match(self.con, load_sql("replay_load_tokens"), lists, meta)


def stored_trace(con: duckdb.DuckDBPyConnection) -> StoredTrace | LoadedTrace:
    """The store's requests for a replay that needs no token id after L1/L2: a StoredTrace
    where that saves memory (token ids only, at least COMPILED_MIN_UNITS of them, and the
    radix trees' C loop built to stream them through), else the LoadedTrace as
    `load_trace`."""
    require_tables(con, "requests")
    columns, lens, has = read_scalars(con)
    if not columns["request_id"]:
        raise StoreError("no requests in the database; run `hpa ingest FILE` first")
    prompt_len, output_len = lens["prompt_token_ids"], lens["output_token_ids"]
    hashed = has["block_hash_ids"].any() or any(b is not None for b in columns["block_size"])
    small = int(prompt_len.sum() + output_len.sum()) < COMPILED_MIN_UNITS
    if hashed or small or not radix.available():
        return load_trace(con)
    return StoredTrace(columns, con, prompt_len, output_len)
