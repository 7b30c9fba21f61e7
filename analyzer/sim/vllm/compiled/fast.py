"""Closed-form replay for the common case: no capacity limit, no sliding window, no
speculative decoding, match unit = block size (full attention, optionally + Mamba align).

Without eviction a hash, once cached, stays; the block pool then only matters through which
hashes each group holds, and those follow from the chunk ends alone:

- full attention caches every block of the computed tokens: blocks [0, (P + k - 1) // B) for a
  prompt of P tokens that samples k >= 1 tokens (the last sampled token is never computed);
- Mamba holds a state block per step end e, in slot cdiv(e, B) - 1, until it is passed; the
  block is hashed (under boundary x = cdiv(e, B) * B) when a later step covers x, if the
  retention mask keeps x. Decode steps end at every token, so every block boundary in
  (P, P + k - 1] is such an x.

        B=4, prompt 10, hit 0, retention None:  chunk ends 8, 10; decode to 13
        Mamba boundaries: 8 (chunk end), 12 (10 -> slot 2, covered at 12 by decode)

`tests/sim/vllm/test_properties.py` checks this against the block-level replay (`VllmReplay` with
`fast=False`) on random traces. Units: tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from analyzer.sim.common.block_hash import HashInterner, request_hashes
from analyzer.sim.records import ResultColumns, SimRequest, SimResult
from analyzer.sim.vllm.layout import CacheLayout, cdiv
from analyzer.sim.vllm.reference import failed
from analyzer.sim.vllm.scheduler import chunk_tokens


class _Req:
    """The three fields the chunk rules read (see `managers.ReqState`)."""

    __slots__ = ("prompt", "num_tokens", "junction")

    def __init__(self, prompt: int, junction: int) -> None:
        self.prompt = self.num_tokens = prompt
        self.junction = junction


def chunk_ends(layout: CacheLayout, prompt: int, hit: int, junction: int) -> list[int]:
    """Where each prefill chunk of a request ends (the scheduler's stops, `scheduler.py`).

    A budget at least the prompt's rest (`vllm serve`'s 8192 against most prompts) cuts
    nothing: the stops are then the unbudgeted ones. Full attention alone cuts only by it."""
    budget = layout.max_num_batched_tokens
    if budget is not None and prompt - hit > budget:
        if not layout.has_mamba:
            return list(range(hit + budget, prompt, budget)) + [prompt]
        req = _Req(prompt, junction)
        ends, start = [], hit
        while start < prompt:
            start += chunk_tokens(layout, req, start, prompt - start)
            ends.append(start)
        return ends
    if not layout.has_mamba:
        return [prompt]
    # No budget: stop at the junction, then at the last block boundary before the end.
    # (junction <= last: attention matches at most prompt - 1 tokens, block-floored)
    last = (prompt - 1) // layout.block_size * layout.block_size
    ends = []
    if hit < junction:
        ends.append(junction)
    if max(hit, junction) < last:
        ends.append(last)
    ends.append(prompt)
    return ends


class UnboundedReplay:
    """Per-request replay over two hash sets (full attention, Mamba)."""

    def __init__(self, layout: CacheLayout, interner: HashInterner) -> None:
        self.layout = layout
        self.interner = interner
        self.attention: set[int] = set()
        self.mamba: set[int] | None = set() if layout.has_mamba else None
        self.block = layout.block_size

    def run(self, requests: Iterable[SimRequest]) -> Iterator[SimResult]:
        for request in requests:
            yield self.replay_one(request)

    def replay_one(self, sim: SimRequest) -> SimResult:
        B = self.block
        prompt = sim.num_prompt_tokens
        outputs = sim.num_output_tokens
        total = prompt + outputs - 1 if outputs > 1 else prompt  # computed in the end
        full = total // B
        if prompt < 1:
            return failed(sim.request_id, prompt, "empty prompt")
        if sim.prompt_token_ids is None:
            hashes = request_hashes(self.interner, sim, B, 0)[0].extend(full)
        else:
            hashes = self._hashes(sim, full)
        attention, mamba = self.attention, self.mamba
        run, cap = 0, (prompt - 1) // B
        while run < cap and hashes[run] in attention:
            run += 1
        longest = hit = run * B
        if mamba is not None:
            i = run - 1
            while i >= 0 and hashes[i] not in mamba:
                i -= 1
            hit = (i + 1) * B
        junction = longest if longest > hit else 0
        ends = chunk_ends(self.layout, prompt, hit, junction)
        attention.update(hashes[run:full])
        if mamba is not None:
            self._keep_states(mamba, hashes, ends, prompt, hit, junction, total)
        start, chunks = hit, []
        for end in ends:
            chunks.append(end - start)
            start = end
        if total > prompt:
            chunks += [1] * (total - prompt)
        miss = longest - hit
        return SimResult(
            sim.request_id, prompt, hit, miss, miss, 0, longest, longest, junction, tuple(chunks)
        )

    def _hashes(self, sim: SimRequest, count: int) -> list[int]:
        """The first `count` block hash ids."""
        source, _ = request_hashes(self.interner, sim, self.block, 0)
        return source.extend(count)

    def _keep_states(
        self,
        mamba: set[int],
        hashes: list[int],
        ends: list[int],
        prompt: int,
        hit: int,
        junction: int,
        total: int,
    ) -> None:
        """Hash the Mamba states this request leaves behind (see the module docstring).

        Retention 0 keeps only the reachable boundaries (the last block boundary before the
        prompt's end, the junction); both are chunk ends whenever they lie past the hit.
        """
        B = self.block
        last = (prompt - 1) // B * B
        retention = self.layout.retention_interval
        if retention == 0:
            if last > hit:
                mamba.add(hashes[last // B - 1])
            if junction:
                mamba.add(hashes[junction // B - 1])
            return
        reach = total // B * B
        bounds = {-(-e // B) * B for e in ends}
        if reach > prompt:
            bounds.update(range(cdiv(prompt + 1, B) * B, reach + 1, B))
        keep_all = retention is None or retention // B <= 1
        for x in bounds:
            if hit < x <= reach and (keep_all or x % retention == 0 or x == last or x == junction):
                mamba.add(hashes[x // B - 1])


# -- full attention alone: every hit follows from the prefix shared with earlier requests ---


def attention_columns(
    layout: CacheLayout,
    request_ids: Sequence[str],
    prompt_tokens: np.ndarray,
    shared_tokens: np.ndarray,
) -> ResultColumns:
    """Per request, what `UnboundedReplay` gives under a layout `gates.SHARED_FORM` admits,
    as columns (`records.result_columns`; every field but `chunks`, which no table keeps:
    `attention_results` adds them), from the requests' ids, their prompt lengths and
    `shared_tokens` (per request, in tokens): the longest prefix of its prompt shared with
    the tokens an earlier request of its cache (and namespace) computed (prompt + outputs
    but the last). Token-id requests only; no SimRequest is needed (50,000 of them cost a
    replay 0.18 s).

    Why it is the same: without eviction a block, once computed, stays cached, and a block's
    hash chains every token before it; so the leading blocks found cached are the whole
    blocks of that shared prefix, capped (as vLLM does) below the prompt's last token.
    """
    B, n = layout.block_size, len(request_ids)
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    shared = np.minimum(np.asarray(shared_tokens, dtype=np.int64), prompt)
    hit = np.minimum(shared // B, np.maximum(prompt - 1, 0) // B) * B
    columns: ResultColumns = {name: [None] * n for name in SimResult._fields if name != "chunks"}
    columns.update({name: hit.copy() for name in _HIT})
    columns.update({name: np.zeros(n, dtype=np.int64) for name in _NOTHING})
    columns["request_id"] = list(request_ids)
    columns["prompt_tokens"] = prompt
    columns["error"] = ["empty prompt" if p < 1 else None for p in prompt.tolist()]
    return columns


# Without eviction or Mamba: every match is a hit, and nothing is missed (or preempted, or
# loaded from a host tier).
_HIT = ("hit_tokens", "attention_match_tokens", "attention_match_after_spec_tokens")
_NOTHING = (
    "sparse_retention_miss_tokens",
    "sparse_retention_miss_never_kept_tokens",
    "sparse_retention_miss_evicted_tokens",
    "junction_tokens",
    "replay_tokens",
    "num_preemptions",
    "recomputed_tokens",
    # no host tier on a closed form (gates.SHARED_FORM refuses one)
    "host_hit_tokens",
    "host_wait_steps",
    "host_evicted_tokens",
    "host_never_stored_tokens",
    "host_never_stored_decode_tokens",
    "host_never_stored_sparse_tokens",
    "host_never_stored_no_slot_tokens",
)


def attention_results(
    layout: CacheLayout, requests: list[SimRequest], shared_tokens: np.ndarray
) -> list[SimResult]:
    """`attention_columns` as SimResults, with the steps each request is scheduled in."""
    ids = [r.request_id for r in requests]
    prompt = np.fromiter((r.num_prompt_tokens for r in requests), np.int64, len(requests))
    columns = attention_columns(layout, ids, prompt, shared_tokens)
    decode = [max(r.num_output_tokens - 1, 0) for r in requests]
    one_chunk = layout.max_num_batched_tokens is None  # no budget: the prompt's rest at once
    decodes = (1,) * max(decode, default=0)  # sliced per request: one tuple, no loop
    out = []
    rows = zip(
        columns["request_id"],
        columns["prompt_tokens"].tolist(),
        columns["hit_tokens"].tolist(),
        decode,
        strict=True,
    )
    for rid, p, h, d in rows:
        if p < 1:
            out.append(failed(rid, p, "empty prompt"))
            continue
        if one_chunk:
            chunks = (p - h,) + decodes[:d]
        else:
            ends = chunk_ends(layout, p, h, 0)
            chunks = tuple(e - s for s, e in zip([h, *ends[:-1]], ends, strict=True))
            chunks += decodes[:d]
        out.append(SimResult(rid, p, h, 0, 0, 0, h, h, 0, chunks))
    return out
