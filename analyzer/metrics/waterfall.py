"""The loss waterfall (docs/definitions.md#the-loss-waterfall), one definition per term.

    L0 prompt_tokens
    L1 shared_any_tokens        unshared_tokens          = L0 - L1  (token identity)
    L2 shared_replica_tokens    lost_routing_tokens      = L1 - L2
    L2b shared_scheduled_tokens lost_in_flight_tokens    = L2 - L2b (concurrent schedule)
    L3 matchable_tokens         lost_granularity_tokens  = L2b - L3
    L4 attention_match_tokens   lost_eviction_tokens     = L3 - L4
    L5 (hit + sparse miss)      sparse_retention_miss    = L4 - L5
    L6 hit_tokens               lost_spec_decode_tokens  = L5 - L6

L2b exists under the concurrent schedule: L2 limited to the tokens the earlier requests had
scheduled (so cached or being computed) when this one was admitted, finished ones whole
(`sim/vllm/scheduled.py`); the shared prefix beyond it was still in flight, so no cache of any
size could have served it. A serial replay has L2b = L2. L3 is L2b capped at prompt_tokens - 1
(the last token is always computed), floored to the hit alignment (the prefix match unit
when fine-grained hits are on, else the block size) and limited to what the earlier requests
had cached, when the replay knows it (an unbounded pool of an engine that keeps all it
computes, or a bounded vLLM pool with sub-block hits, which records the keys ever cached: a
partial block nobody cached is granularity, not eviction). L4 is what full attention had resident,
with plain hashes (no EAGLE lookahead or drop). vLLM's sparse-retention miss is measured after
the speculative decoding adjustment, so L5 = L4 - miss and L5 - L6 is what lookahead / drop
took. L2b is held within [L4, L2] (lookahead hashes can put it a unit below what was resident).
Every level is <= the one above, so the causes are never negative and sum to L0.

A host KV tier (vLLM's OffloadingConnector, policy key `host_tier_gib`) loads the chunks
right after the GPU hit: prompt positions [L6, L6 + H), H = host_hit_tokens. Those tokens
are not recomputed, so they are hits: the request's hit is L6 + H, and each position the
host gave back is taken out of the cause whose span [lower level, upper level) holds it
(`won_back`). Every cause is then what was recomputed, and the causes plus the GPU hit plus
the host hit still sum to L0. With no tier (H = 0) nothing moves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CAUSES = (
    "unshared_tokens",
    "lost_routing_tokens",
    "lost_in_flight_tokens",
    "lost_granularity_tokens",
    "lost_eviction_tokens",
    "sparse_retention_miss_tokens",
    "lost_spec_decode_tokens",
)


@dataclass(frozen=True)
class Levels:
    """Per-request waterfall levels (int64 arrays of equal length), in tokens."""

    prompt_tokens: np.ndarray
    shared_any_tokens: np.ndarray
    shared_replica_tokens: np.ndarray
    shared_scheduled_tokens: np.ndarray
    matchable_tokens: np.ndarray
    attention_match_tokens: np.ndarray
    before_spec_tokens: np.ndarray
    hit_tokens: np.ndarray
    host_hit_tokens: np.ndarray | None = None

    def _chain(self) -> tuple[np.ndarray, ...]:
        return (
            self.prompt_tokens,
            self.shared_any_tokens,
            self.shared_replica_tokens,
            self.shared_scheduled_tokens,
            self.matchable_tokens,
            self.attention_match_tokens,
            self.before_spec_tokens,
            self.hit_tokens,
        )

    def gpu_causes(self) -> dict[str, np.ndarray]:
        """Tokens lost between consecutive levels on the GPU alone (before a host tier)."""
        chain = self._chain()
        return {
            name: upper - lower
            for name, upper, lower in zip(CAUSES, chain, chain[1:], strict=False)
        }

    def won_back(self) -> dict[str, np.ndarray]:
        """Per cause, the tokens of its span the host tier gave back: the overlap of
        [lower, upper) with [L6, L6 + host_hit_tokens)."""
        chain = self._chain()
        host = self.host_hit_tokens
        if host is None:
            return {name: np.zeros_like(self.hit_tokens) for name in CAUSES}
        top = self.hit_tokens + host
        return {
            name: np.maximum(np.minimum(upper, top) - lower, 0)
            for name, upper, lower in zip(CAUSES, chain, chain[1:], strict=False)
        }

    def causes(self) -> dict[str, np.ndarray]:
        """Tokens lost (recomputed) between consecutive levels, named as in
        docs/definitions.md, net of what the host tier gave back, plus the hit (GPU + host)."""
        out = self.gpu_causes()
        if self.host_hit_tokens is None:
            out["hit_tokens"] = self.hit_tokens
            return out
        for name, back in self.won_back().items():
            out[name] = out[name] - back
        out["hit_tokens"] = self.hit_tokens + self.host_hit_tokens
        return out


class WaterfallError(AssertionError):
    """A level above its parent: a bug in the replay or the matcher, never user input."""


def matchable(
    shared_replica_tokens: np.ndarray, prompt_tokens: np.ndarray, align_tokens: int
) -> np.ndarray:
    """L3: shared (scheduled) prefix capped at prompt_tokens - 1, floored to `align_tokens`."""
    capped = np.minimum(shared_replica_tokens, prompt_tokens - 1)
    return capped // align_tokens * align_tokens


def build_levels(
    *,
    prompt_tokens,
    shared_any_tokens,
    shared_replica_tokens,
    align_tokens,
    attention_match_tokens,
    sparse_retention_miss_tokens,
    hit_tokens,
    shared_scheduled_tokens=None,
    cached_ever_tokens=None,
    host_hit_tokens=None,
) -> Levels:
    """Levels from matcher and replay figures; raises WaterfallError if any level rises.
    `shared_scheduled_tokens`: L2b per request from the replay (None: a serial replay,
    L2b = L2). `cached_ever_tokens`: what the earlier requests had cached of the prompt,
    evicted or not (None: unknown, L3 not limited by it); the waterfall limits L3 to it, so a
    partial block nobody cached is granularity, not eviction. `host_hit_tokens`: what a host
    KV tier loaded beyond the GPU hit `hit_tokens` (None or all 0: no tier)."""
    as64 = lambda a: np.asarray(a, dtype=np.int64)  # noqa: E731
    p, l4, hit = as64(prompt_tokens), as64(attention_match_tokens), as64(hit_tokens)
    l2 = as64(shared_replica_tokens)
    l2b = l2 if shared_scheduled_tokens is None else np.clip(as64(shared_scheduled_tokens), l4, l2)
    l3 = matchable(l2b, p, align_tokens)
    if cached_ever_tokens is not None:
        l3 = np.minimum(l3, as64(cached_ever_tokens))
    levels = Levels(
        prompt_tokens=p,
        shared_any_tokens=as64(shared_any_tokens),
        shared_replica_tokens=l2,
        shared_scheduled_tokens=l2b,
        matchable_tokens=l3,
        attention_match_tokens=l4,
        before_spec_tokens=l4 - as64(sparse_retention_miss_tokens),
        hit_tokens=hit,
        host_hit_tokens=_host(host_hit_tokens),
    )
    check(levels)
    return levels


def _host(host_hit_tokens) -> np.ndarray | None:
    """The host hits as int64, or None where there are none (no tier: nothing moves)."""
    if host_hit_tokens is None:
        return None
    host = np.asarray(host_hit_tokens, dtype=np.int64)
    return host if host.any() else None


def check(levels: Levels) -> None:
    """Every level is >= 0 and <= the one above it, and the host hit fits above the GPU hit
    within the prompt (so causes, net of the host, sum to prompt_tokens)."""
    if levels.host_hit_tokens is not None:
        host, top = levels.host_hit_tokens, levels.hit_tokens + levels.host_hit_tokens
        bad = np.flatnonzero((host < 0) | (top > levels.prompt_tokens))
        if bad.size:
            i = int(bad[0])
            raise WaterfallError(
                f"waterfall: host_hit_tokens {int(host[i])} above the GPU hit "
                f"{int(levels.hit_tokens[i])} leaves the prompt of "
                f"{int(levels.prompt_tokens[i])} tokens at request index {i}"
            )
    for name, lost in {**levels.gpu_causes(), "hit_tokens": levels.hit_tokens}.items():
        bad = np.flatnonzero(lost < 0)
        if bad.size:
            i = int(bad[0])
            chain = [int(level[i]) for level in levels._chain()]
            raise WaterfallError(
                f"waterfall: {name} is {int(lost[i])} at request index {i} (levels: {chain})"
            )


def sparse_split_net(
    never_kept_tokens, evicted_tokens, won_back_tokens
) -> tuple[np.ndarray, np.ndarray]:
    """The sparse-retention miss's two parts (never kept, evicted) net of what a host tier
    gave back of it: taken from the evicted part first (the host stores a sparse state only
    when the GPU cache keeps it, so a state it gives back was evicted from the GPU), then
    from the never-kept part (a state kept at another boundary)."""
    never = np.asarray(never_kept_tokens, dtype=np.int64)
    evicted = np.asarray(evicted_tokens, dtype=np.int64)
    back = np.asarray(won_back_tokens, dtype=np.int64)
    from_evicted = np.minimum(back, evicted)
    return never - (back - from_evicted), evicted - from_evicted
