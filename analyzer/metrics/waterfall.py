"""The loss waterfall of SPEC 3, one definition per term.

    L0 prompt_tokens
    L1 shared_any_tokens        unshared_tokens          = L0 - L1  (token identity)
    L2 shared_replica_tokens    lost_routing_tokens      = L1 - L2
    L3 matchable_tokens         lost_granularity_tokens  = L2 - L3
    L3' scheduled_match_tokens  lost_in_flight_tokens    = L3 - L3'
    L4 attention_match_tokens   lost_eviction_tokens     = L3' - L4
    L5 (hit + sparse miss)      sparse_retention_miss    = L4 - L5
    L6 hit_tokens               lost_spec_decode_tokens  = L5 - L6

L3 is L2 capped at prompt_tokens - 1 (the last token is always computed) and floored
to the hit alignment (the prefix match unit when fine-grained hits are on, else the
block size). L4 is what full attention had resident, with plain hashes (no EAGLE
lookahead or drop). vLLM's sparse-retention miss is measured after the speculative
decoding adjustment, so L5 = L4 - miss and L5 - L6 is what lookahead / drop took.
L3' exists under the concurrent schedule: full attention's match, at admission, against
every block scheduled so far (an unbounded cache of what had been produced); the shared
prefix beyond it was still in flight (not yet scheduled, or outputs not yet generated), so
no cache of any size could have served it. It is held within [L4, L3] (lookahead hashing
can put it a unit outside); a serial replay has L3' = L3 (nothing in flight).
Every level is <= the one above, so the causes are never negative and sum to L0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CAUSES = (
    "unshared_tokens",
    "lost_routing_tokens",
    "lost_granularity_tokens",
    "lost_in_flight_tokens",
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
    matchable_tokens: np.ndarray
    scheduled_match_tokens: np.ndarray
    attention_match_tokens: np.ndarray
    before_spec_tokens: np.ndarray
    hit_tokens: np.ndarray

    def causes(self) -> dict[str, np.ndarray]:
        """Tokens lost between consecutive levels, named as in SPEC 3, plus the hit."""
        chain = (
            self.prompt_tokens,
            self.shared_any_tokens,
            self.shared_replica_tokens,
            self.matchable_tokens,
            self.scheduled_match_tokens,
            self.attention_match_tokens,
            self.before_spec_tokens,
            self.hit_tokens,
        )
        out = {
            name: upper - lower
            for name, upper, lower in zip(CAUSES, chain, chain[1:], strict=False)
        }
        out["hit_tokens"] = self.hit_tokens
        return out


class WaterfallError(AssertionError):
    """A level above its parent: a bug in the replay or the matcher, never user input."""


def matchable(
    shared_replica_tokens: np.ndarray, prompt_tokens: np.ndarray, align_tokens: int
) -> np.ndarray:
    """L3: shared prefix capped at prompt_tokens - 1, floored to `align_tokens`."""
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
    scheduled_match_tokens=None,
) -> Levels:
    """Levels from matcher and replay figures; raises WaterfallError if any level rises.
    `scheduled_match_tokens`: L3' per request (None: a serial replay, L3' = L3)."""
    as64 = lambda a: np.asarray(a, dtype=np.int64)  # noqa: E731
    p, l4, hit = as64(prompt_tokens), as64(attention_match_tokens), as64(hit_tokens)
    l3 = matchable(as64(shared_replica_tokens), p, align_tokens)
    l3b = l3 if scheduled_match_tokens is None else np.clip(as64(scheduled_match_tokens), l4, l3)
    levels = Levels(
        prompt_tokens=p,
        shared_any_tokens=as64(shared_any_tokens),
        shared_replica_tokens=as64(shared_replica_tokens),
        matchable_tokens=l3,
        scheduled_match_tokens=l3b,
        attention_match_tokens=l4,
        before_spec_tokens=l4 - as64(sparse_retention_miss_tokens),
        hit_tokens=hit,
    )
    check(levels)
    return levels


def check(levels: Levels) -> None:
    """Every level is >= 0 and <= the one above it (so causes sum to prompt_tokens)."""
    for name, lost in levels.causes().items():
        bad = np.flatnonzero(lost < 0)
        if bad.size:
            i = int(bad[0])
            raise WaterfallError(
                f"waterfall: {name} is {int(lost[i])} at request index {i} "
                f"(levels: {[int(getattr(levels, f)[i]) for f in Levels.__dataclass_fields__]})"
            )
