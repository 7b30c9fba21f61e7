"""Engine `marconi`: Marconi (Pan et al., MLSys 2025; reference/hybrid-policies.md section 2),
replayed serially like the vLLM engine.

Tree: one page-level radix tree (analyzer/sim/common/tree.py); a page is block_size tokens
keyed by its chained block hash. Marconi is token-level; here every depth is whole pages
(exact at block_size 1).

Placement (admission): at most two states per request. Before prefill, a speculative
insertion walks the tree with the prompt's pages; if the prompt diverges inside an edge at b,
the prefill checkpoints the state at b. When the request finishes, its computed tokens
(prompt + outputs - 1, whole pages) are inserted with the state after the last page; the split
at b (when the insert makes it) gets the checkpoint. So a purely-input prefix hits from its
3rd occurrence (the 2nd finds and checkpoints the branch point) and conversation history
(prompt + output) from the next turn.

Hit: whole edges only - the depth of the deepest fully matched node holding a state (a split
without a checkpoint, e.g. inside decoded tokens, has none). attention_match is the matched KV,
partial edge included. Only the deepest fully matched node's access time is refreshed.

Eviction (FLOP-aware): candidates are nodes holding a state with at most one child; score =
norm(recency) + marconi_alpha x norm(FLOP efficiency), min-max normalised over the candidates,
recency = 1 / (now - last access) on a logical clock (one tick per request); the lowest goes.
A leaf frees its state and KV; a single-child node frees its state and its edge merges into its
child. Efficiency = FLOPs saved / bytes (flops.py): saved = Mamba FLOPs of the edge + attention
and MLP FLOPs of the path minus those of the parent path; bytes = the node's state plus the KV
of its whole root path (as Marconi's artifact). Layer counts and bytes come from the `model`
preset when it has them (d = 4096, N = 128 and one MLP per layer assumed); otherwise Marconi's
7B: 4 attention + 24 SSM + 28 MLP layers, d = 4096, N = 128, fp16.

Capacity: num_blocks blocks of block_size tokens (null = unbounded) hold the cached KV (one
block per page) and the states: a state is charged ceil(state bytes / block KV bytes) blocks
with a preset that has bytes (3 for qwen3-next-80b-a3b), else 1 block. Eviction runs when a
finished request is inserted, before the insert; the request's own path is not evictable.
The running request's memory is not modelled (Marconi's simulator does not either); a request
whose pages + one state exceed the pool gets `error` and is not cached, and an insert that
cannot make room is skipped.

Options: `marconi_alpha` (a number, or "auto"), `marconi_bootstrap` (the window multiplier).
Alpha auto-tuning (Marconi's artifact; MarconiReplay.run / tune): alpha 0 until the first
eviction; right after the request whose insert made it (the n-th), the next marconi_bootstrap x n
requests - only those, the bootstrap window - are read ahead and replayed from a snapshot of the
cache once per alpha in 0, 0.1, ..., 2.0; the alpha saving the most prefill FLOPs over the window
(the artifact's criterion; the paper says hit rate) is adopted, ties to the smaller, and the
window is then replayed for real. `MarconiReplay.tuning` records the outcome.
Not modelled: the chunked-scan approximation of the branch state (the state is taken exactly
at b), speculative decoding (spec_decode must be none), concurrent batches.
"""

from analyzer.sim.marconi.replay import ALPHA_GRID, MarconiReplay, Tuning, replay

__all__ = ["ALPHA_GRID", "MarconiReplay", "Tuning", "replay"]
