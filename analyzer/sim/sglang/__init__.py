"""Engine `sglang`: SGLang's radix caches for hybrid models (reference/hybrid-policies.md 1.1,
1.3), replayed serially like the vLLM engine.

Tree: a page-level radix tree (analyzer/sim/common/tree.py); a page is block_size tokens
keyed by its chained block hash (token-id and hash-id traces alike), split where a match or
insert diverges inside an edge. Only whole pages are cached (SGLang cuts keys to the page
size); the match runs over the prompt less its last token.

Since 0.5.16 SGLang serves every hybrid model with one UnifiedRadixCache; these are its rules,
checked request by request against its own code (tools/oracle/sglang/, docs/engines.md).

Groups full_attention + mamba: a node may hold one recurrent state, taken
after its last token; a node without one is a tombstone (KV kept). The hit is the depth of the
deepest node on the matched path that holds a state; attention_match is the whole matched KV.
States are placed by `sglang_strategy`:
- no_buffer: after every prefill chunk (max_num_batched_tokens, floored to whole pages) and at
  the end of the finished sequence (prompt + outputs - 1). SGLang requires page size 1 here;
  with block_size > 1 each state is put on the page boundary at or below its position (as if
  chunk and sequence ends were page aligned): exact at block_size 1, an approximation above.
- extra_buffer: per prefill extend (chunk) of e >= C tokens starting at p, one state at
  p + floor(e / C) * C, C = max(sglang_chunk_tokens, block_size); the branch point
  floor_C(attention match) of the previous match wins when it lies inside the extend on the
  grid; decode tracks a state every lcm(C, sglang_track_interval) tokens (the unified cache's
  rule, so a decode state is always page aligned). The finished sequence is cached only up to
  its last tracked state: the tail after it is not cached (its KV is freed).
Groups full_attention alone: the plain RadixCache (every node is a hit point, no state pool).
Groups full_attention + sliding_window (swa.py, SWARun): window validator; a request frees its
slid-out SWA KV only at checkpoints of an unfinished request and in decode, and keeps a live
window at the SWA branch point; a new live leaf longer than one window is split there (the
older part's SWA can go alone); the SWA pool is sglang_swa_full_tokens_ratio x the KV pool.
All three groups: SGLang's unified radix cache with both components (unified.py): one tree, a
hit where every validator passes (KV, SWA window, Mamba state), per-component LRU with the
cascade SWA > MAMBA on internal nodes, FA + SWA's window rules, Mamba branch points
(reference 1.3).
Placement (grids, track points, the pools) is shared by all of them (placement.py).

Capacity: the KV pool is num_blocks x block_size tokens (null = unbounded), shared by the tree
and the running request's KV (a prefill chunk, a decode step); states are NOT charged to it but
to their own pool of `sglang_num_states` slots (null = unbounded), which also holds the running
request's own slots (1 live slot for no_buffer, 3 for extra_buffer: live + 2 ping-pong) - SGLang
sizes the two pools separately (--mamba-full-memory-ratio). A request larger than the KV pool
gets `error` and is not cached. The running request holds whole pages; above page 1 an
extend evicts for its tokens plus one page and each decode step for one page (SGLang's paged
allocator), at page 1 for the exact need.
LRU (the unified cache's refresh rules): a match refreshes the full LRU stamp of the matched
path down to the hit node, and the state stamp of the hit node only; a split stamps both
halves; an insert refreshes the full stamps of the nodes it walks and the state stamp of the
node that gets the state. Eviction before an allocation: KV -> least recent unlocked leaf
(its KV and state; a parent left childless stays with its KV); a state slot -> least recent
unlocked state (internal node -> tombstone, leaf -> deleted as above). A request that
finishes with its prefill hands its last state to the tree. Locks: the running request's
current node (hit node, then its last cached node) with its path to the root.

Not modelled: speculative decoding (spec_decode must be none), HiCache, the path state cap,
extra_buffer_lazy, SWA recompute, overlap scheduling, batching of concurrent requests.
"""

from analyzer.sim.sglang.replay import SGLangReplay, replay

__all__ = ["SGLangReplay", "replay"]
