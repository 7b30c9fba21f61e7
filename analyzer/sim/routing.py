"""Routing: which replica serves each request (decided before the replay, so each
(model revision, replica) partition replays independently of the others).

- `trace`: the record's own `replica` (a record without one goes to replica "0");
- `round_robin`: request i (arrival order) -> replica i mod n;
- `session`: every request of a conversation to one replica; conversations (and requests
  without one) take replicas round robin in order of first appearance;
- `prefix_aware` under the serial schedule (no clock, so no load to read; under the
  concurrent one it routes live, `sim/routers/prefix_aware.py`): the replica whose earlier
  requests share the longest prefix with this prompt, counted in whole match units (a
  hash-id trace's sequences hold one id per trace block: the unit counts in those); ties
  go to the replica with fewer requests so far, then the lowest number (a cache-blind,
  eviction-blind router, like a gateway that tracks prefixes it has sent where).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def route(
    routing: str,
    num_replicas: int,
    *,
    trace_replicas: Sequence[str | None],
    conversation_ids: Sequence[str | None],
    sequences: Sequence[np.ndarray] | None = None,
    namespaces: Sequence[object] | None = None,
    unit_tokens: int = 1,
    item_tokens: Sequence[int | None] | None = None,
) -> list[str]:
    """The replica label of every request, in arrival order. `item_tokens`: per request, the
    tokens one item of its sequence stands for (a hash-id trace's block size; None: a token)."""
    n = len(trace_replicas)
    if routing == "trace":
        return [r if r is not None else "0" for r in trace_replicas]
    if routing == "round_robin":
        return [str(i % num_replicas) for i in range(n)]
    if routing == "session":
        return _session(conversation_ids, num_replicas)
    if routing == "prefix_aware":
        if sequences is None or namespaces is None:
            raise ValueError("prefix_aware routing needs the prompt token sequences")
        items = item_tokens or [None] * len(sequences)
        units = [max(1, unit_tokens // (t or 1)) for t in items]
        return _prefix_aware(sequences, namespaces, num_replicas, units)
    raise ValueError(f"unknown routing {routing!r}")


def _session(conversation_ids: Sequence[str | None], num_replicas: int) -> list[str]:
    assigned: dict[str, str] = {}
    turn = 0
    out = []
    for conv in conversation_ids:
        if conv is not None and conv in assigned:
            out.append(assigned[conv])
            continue
        replica = str(turn % num_replicas)
        turn += 1
        if conv is not None:
            assigned[conv] = replica
        out.append(replica)
    return out


def _prefix_aware(sequences, namespaces, num_replicas: int, units: list[int]) -> list[str]:
    # One set of chained unit-block ids per replica: a block id stands for the whole
    # prefix up to its end, so "replica holds id" means "replica saw that prefix".
    ids: dict[tuple, int] = {}
    held: list[set[int]] = [set() for _ in range(num_replicas)]
    load = [0] * num_replicas
    out = []
    for seq, ns, unit in zip(sequences, namespaces, units, strict=True):
        chain = _chain_ids(np.asarray(seq), ns, unit, ids)
        best = min(range(num_replicas), key=lambda r: (-_depth(chain, held[r]), load[r], r))
        held[best].update(chain)
        load[best] += 1
        out.append(str(best))
    return out


def _chain_ids(seq: np.ndarray, ns: object, unit: int, ids: dict[tuple, int]) -> list[int]:
    data = seq.astype(np.int64, copy=False).tobytes()
    step = unit * 8
    parent: object = ("ns", ns)
    chain = []
    for start in range(0, len(data) - step + 1, step):
        key = (parent, data[start : start + step])
        parent = ids.setdefault(key, len(ids))
        chain.append(parent)
    return chain


def _depth(chain: list[int], held: set[int]) -> int:
    depth = 0
    for block in chain:
        if block not in held:
            break
        depth += 1
    return depth
