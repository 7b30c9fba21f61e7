"""A llama-server slot (its memory and context checkpoints) and the host prompt cache.

Units: tokens. A sequence is kept as the ids that identify it: token ids (unit 1), or for a
hash-id trace the trace block ids (unit = the trace block size), so a common prefix is
measured in whole trace blocks there. Sequences of different namespaces share nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from analyzer.sim.records import SimRequest

SLOT_SIMILARITY = 0.10  # --slot-prompt-similarity: reuse the slot above this LCP / prompt
KEEP_LOAD = 0.25  # the cache never loads a state that would keep less than this of it
KEEP_SAVE = 0.5  # a slot chosen by similarity is saved when it keeps less than this


@dataclass(frozen=True, eq=False)
class Sequence:
    """Known ids of a token sequence: `ids` cover `known_tokens` tokens in units of `unit`;
    `length` tokens in all (the rest, decode output given only as a count, match nothing)."""

    ids: np.ndarray
    unit: int
    known_tokens: int
    length: int
    namespace: Hashable = None

    def common_prefix(self, other: Sequence) -> int:
        """Tokens the two sequences share from the start (0 across namespaces or id kinds)."""
        if self.unit != other.unit or self.namespace != other.namespace:
            return 0
        m = min(len(self.ids), len(other.ids))
        differ = np.flatnonzero(self.ids[:m] != other.ids[:m])
        blocks = int(differ[0]) if differ.size else m
        return min(blocks * self.unit, self.known_tokens, other.known_tokens)

    def covers(self, other: Sequence) -> bool:
        """Whether `other` is a prefix of this sequence (the same object always is)."""
        if self is other:
            return True
        return self.known_tokens >= other.length and self.common_prefix(other) >= other.length


def prompt_sequence(sim: SimRequest) -> Sequence:
    """The request's prompt as a Sequence."""
    prompt = sim.num_prompt_tokens
    if sim.prompt_token_ids is not None:
        ids = np.asarray(sim.prompt_token_ids, dtype=np.int64)
        return Sequence(ids, 1, prompt, prompt, sim.namespace)
    ids = np.asarray(sim.block_hash_ids, dtype=np.int64)
    return Sequence(ids, sim.trace_block_size or 1, prompt, prompt, sim.namespace)


def memory_sequence(sim: SimRequest, prompt: Sequence) -> Sequence:
    """What the slot holds once the request finished: prompt + outputs - 1 tokens (the last
    sampled token is never fed back); output ids are known only on token-id requests."""
    outputs = sim.num_output_tokens
    length = prompt.length + max(outputs - 1, 0)
    if prompt.unit == 1 and sim.output_token_ids is not None and outputs > 1:
        tail = np.asarray(sim.output_token_ids, dtype=np.int64)[: outputs - 1]
        ids = np.concatenate([prompt.ids, tail])
        return Sequence(ids, 1, length, length, prompt.namespace)
    return Sequence(prompt.ids, prompt.unit, prompt.known_tokens, length, prompt.namespace)


@dataclass(eq=False)
class Slot:
    """A memory and its checkpoints. `checkpoints`: positions (tokens of state they hold),
    ascending, oldest first. `ever`: every position ever checkpointed whose prefix is still a
    prefix of the memory (to tell evicted states from never-kept ones)."""

    memory: Sequence | None = None
    checkpoints: list[int] = field(default_factory=list)
    ever: list[int] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return 0 if self.memory is None else self.memory.length


class HostCache:
    """llama-server's host prompt cache (`--cache-ram`): saved slot states (memory and
    checkpoints), oldest first, capacity `limit_tokens` cached tokens (None = unbounded)."""

    def __init__(self, limit_tokens: int | None) -> None:
        self.limit_tokens = limit_tokens
        self.states: deque[Slot] = deque()

    def save(self, slot: Slot) -> None:
        """Store a copy of the slot unless a cached state already holds it; cached states it
        holds become obsolete."""
        memory = slot.memory
        if memory is None or memory.length == 0:
            return
        if any(state.memory.covers(memory) for state in self.states):
            return
        self.states = deque(s for s in self.states if not memory.covers(s.memory))
        self.states.append(Slot(memory, list(slot.checkpoints), list(slot.ever)))

    def load(self, slot: Slot, prompt: Sequence) -> Slot:
        """The state the slot continues from: the cached one sharing the most with `prompt`
        (both as a fraction of itself and of the prompt) if it beats the slot's own; it
        leaves the cache."""
        lcp = slot.memory.common_prefix(prompt) if slot.memory is not None else 0
        keep_best = lcp / slot.tokens if slot.tokens else -1.0
        sim_best = lcp / prompt.length
        best = None
        for state in self.states:
            lcp = state.memory.common_prefix(prompt)
            keep, sim = lcp / state.tokens, lcp / prompt.length
            if keep >= KEEP_LOAD and keep > keep_best and sim > sim_best:
                best, keep_best, sim_best = state, keep, sim
        if best is None:
            return slot
        self.states.remove(best)
        return best

    def trim(self) -> None:
        """Drop the oldest states while over capacity (one state always stays)."""
        if self.limit_tokens is None:
            return
        total = sum(state.tokens for state in self.states)
        while len(self.states) > 1 and total > self.limit_tokens:
            total -= self.states.popleft().tokens
