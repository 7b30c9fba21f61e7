"""What the compiled replays (dense.py, hybrid.py) are handed per step: the requests'
prompt and output lengths, and every block's hash id laid out in one array.

Token-id requests get their ids from the compiled interner (`common.block_ids`), hash-id
requests as the Python replay hashes them (`hashing.request_hashes`), all from one id
counter, so the compiled loops and the block-level replay compare the same ids. A request's
ids cover its prompt and outputs: (prompt + outputs) // B blocks (none for an empty
prompt), the blocks past its known tokens fresh. Units: tokens, blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from analyzer.sim.common.block_hash import HashInterner, request_hashes
from analyzer.sim.common.block_ids import CompiledBlockIds, LookaheadIds
from analyzer.sim.common.collector import collector_paused
from analyzer.sim.records import SimRequest, SimResult


class StepInput:
    """Per step: `prompt`, `outputs` (tokens, per request) and the block ids, request r's
    being `ids[offsets[r] : offsets[r + 1]]`; with a lookahead (EAGLE) a block's id also
    covers the tokens after it, and `plain` holds the ids without (else it is `ids`)."""

    def __init__(self, interner: HashInterner, block: int, lookahead: int = 0) -> None:
        self.interner = interner
        self.block = block
        self.lookahead = lookahead
        self.block_ids = CompiledBlockIds(interner, block)
        self.lookahead_ids = LookaheadIds(interner, block, lookahead) if lookahead else None

    def __call__(self, requests: list[SimRequest]) -> tuple[np.ndarray, ...]:
        """(prompt, outputs, ids, plain, offsets) of `requests`."""
        n = len(requests)
        prompt = np.fromiter((r.num_prompt_tokens for r in requests), np.int64, n)
        outputs = np.fromiter((r.num_output_tokens for r in requests), np.int64, n)
        B, look, interner = self.block, self.lookahead, self.interner
        total = np.where(prompt >= 1, (prompt + outputs) // B, 0)
        rows, seqs, roots, by_hash, plain_by_hash = [], [], [], {}, {}
        for i, r in enumerate(requests):
            if prompt[i] < 1:
                continue
            if r.prompt_token_ids is None:
                source, plain = request_hashes(interner, r, B, look)
                by_hash[i] = source.extend(int(total[i]))
                if plain is not None:
                    plain_by_hash[i] = plain.extend(int(total[i]))
                continue
            rows.append(i)
            seqs.append((r.prompt_token_ids, r.output_token_ids))
            roots.append(interner.root(r.namespace))
        tokens, starts, lens = _laid_out(seqs)
        roots = np.asarray(roots, np.int64)
        plain, row_offsets = self.block_ids.ids(tokens, starts, lens // B, total[rows], roots)
        ids = plain
        if look:
            known = (lens - look) // B
            ids = self.lookahead_ids.ids(plain, row_offsets, tokens, starts, known)
        if not by_hash:
            offsets = np.zeros(n + 1, np.int64)
            np.cumsum(total, out=offsets[1:])
            return prompt, outputs, ids, plain, offsets  # every row's in order (empty: none)
        ids, offsets = _merged(n, rows, ids, row_offsets, by_hash)
        plain = _merged(n, rows, plain, row_offsets, plain_by_hash)[0] if look else ids
        return prompt, outputs, ids, plain, offsets


def in_steps(
    requests: Iterable[SimRequest], step: Callable[[list[SimRequest]], list[SimResult]], size: int
) -> Iterator[SimResult]:
    """`step`'s results over `requests` handed to it `size` at a time (results come out in
    these steps, so the caller sees progress; the answers never depend on it), Python's
    cycle collector paused in each."""
    batch: list[SimRequest] = []
    for request in requests:
        batch.append(request)
        if len(batch) == size:
            with collector_paused():
                results = step(batch)
            yield from results
            batch = []
    if batch:
        with collector_paused():
            results = step(batch)
        yield from results


def grown(array: np.ndarray, size: int, fill: int) -> np.ndarray:
    """`array` with at least `size` entries (new ones `fill`), at least doubled if grown."""
    if size <= len(array):
        return array
    extra = max(size, 2 * len(array)) - len(array)
    return np.concatenate([array, np.full(extra, fill, array.dtype)])


def _laid_out(seqs: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens, starts, lens): each (prompt, output ids or None) as one int32 run of
    `tokens`. Where every prompt is an int32 view of one array with its output ids right
    after it (a held trace: `access.trace` lays rows out so), that array itself; else
    one concatenation."""
    lens = np.fromiter(
        (len(p) + (0 if o is None else len(o)) for p, o in seqs), np.int64, len(seqs)
    )
    held = _held_starts(seqs)
    if held is not None:
        return *held, lens
    pieces = []
    for p, o in seqs:
        pieces.append(np.asarray(p, np.int32))
        if o is not None and len(o):
            pieces.append(np.asarray(o, np.int32))
    starts = np.zeros(len(seqs), np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    return (np.concatenate(pieces) if pieces else np.zeros(0, np.int32)), starts, lens


def _held_starts(seqs: list) -> tuple[np.ndarray, np.ndarray] | None:
    """(base, starts): the one int32 array every prompt views, each output right after its
    prompt, and where each prompt starts in it (tokens); None when they are not laid out so.

    One pass over the rows: a view's address is read once (`ctypes.data`: half the time of
    `__array_interface__`, which builds a dict a call; 10,000 rows took 25 ms so)."""
    if not seqs or not isinstance(seqs[0][0], np.ndarray):
        return None
    base = seqs[0][0].base
    if not isinstance(base, np.ndarray) or base.dtype != _INT32 or base.ndim != 1:
        return None
    if not base.flags.c_contiguous:
        return None
    addresses = []
    for p, o in seqs:
        if not _run_of(p, base):
            return None
        at = p.ctypes.data
        addresses.append(at)
        if o is not None and len(o) and not (_run_of(o, base) and o.ctypes.data == at + 4 * len(p)):
            return None
    starts = np.fromiter(addresses, np.int64, len(addresses))
    starts -= base.ctypes.data
    starts //= 4
    return base, starts


def _run_of(view, base: np.ndarray) -> bool:
    """Whether `view` is a contiguous run of int32 `base`."""
    return (
        type(view) is np.ndarray
        and view.base is base
        and view.dtype == _INT32
        and (view.strides == _INT32_STRIDES or len(view) <= 1)
    )


_INT32 = np.dtype(np.int32)
_INT32_STRIDES = (4,)


def _merged(n: int, rows: list[int], ids: np.ndarray, offsets: np.ndarray, by_hash: dict):
    """(ids, offsets) of n requests from the token rows' ids and the hash-id rows' lists."""
    parts: list = [[] for _ in range(n)]
    for k, i in enumerate(rows):
        parts[i] = ids[offsets[k] : offsets[k + 1]]
    for i, listed in by_hash.items():
        parts[i] = np.asarray(listed, np.int64)
    lens = np.fromiter((len(p) for p in parts), np.int64, n)
    out = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=out[1:])
    flat = np.concatenate([np.asarray(p, np.int64) for p in parts]) if n else np.zeros(0, np.int64)
    return flat, out
