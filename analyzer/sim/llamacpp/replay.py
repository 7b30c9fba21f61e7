"""Serial replay of llama-server context checkpoints (see the package docstring). Tokens."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from analyzer.config.policy import Policy
from analyzer.errors import ConfigError
from analyzer.sim.common.serial import BLOCK_GROUPS, SerialReplay, check_unmodelled, empty_result
from analyzer.sim.llamacpp.slot import (
    KEEP_SAVE,
    SLOT_SIMILARITY,
    HostCache,
    Sequence,
    Slot,
    memory_sequence,
    prompt_sequence,
)
from analyzer.sim.records import SimRequest, SimResult, match_result


class LlamacppReplay(SerialReplay):
    """One llama-server replica: its slots (each a memory and its checkpoints), optionally a
    host prompt cache of saved slot states."""

    def __init__(self, policy: Policy) -> None:
        check_unmodelled(
            policy,
            "llamacpp",
            placement="its context checkpoints",
            match_unit=False,  # token-level: no blocks
            groups=BLOCK_GROUPS,
            retention=(0,),
        )
        if policy.num_blocks is not None:
            raise ConfigError(
                "policy key 'num_blocks': engine llamacpp keeps llamacpp_slots slots per "
                "replica; their capacity is llamacpp_max_checkpoints (set num_blocks to null, got "
                f"{policy.num_blocks})"
            )
        self.recurrent = "mamba" in policy.groups
        self.max_checkpoints = policy.option("llamacpp_max_checkpoints")
        self.min_step = policy.option("llamacpp_min_step")
        self.n_batch = policy.option("llamacpp_n_batch")
        # llama.cpp clamps the physical batch to the logical one.
        self.n_ubatch = min(policy.option("llamacpp_n_ubatch"), self.n_batch)
        # Batches break so that checkpoints can land this many tokens before the prompt end.
        self.end_offsets = sorted({min(self.n_batch, 4 + self.n_ubatch), min(self.n_batch, 4)})
        cache_tokens = policy.option("llamacpp_cache_tokens")
        self.cache = HostCache(cache_tokens) if cache_tokens != 0 else None
        self.slots = [Slot() for _ in range(policy.option("llamacpp_slots"))]
        self.last_used = [-1] * len(self.slots)  # request index of each slot's last use
        self.seen = 0
        self.slot = self.slots[0]

    def replay_one(self, sim: SimRequest) -> SimResult:
        n = sim.num_prompt_tokens
        if n < 1:
            return empty_result(sim, "empty prompt")
        prompt = prompt_sequence(sim)
        i = self._pick(prompt)
        self.slot = self.slots[i]
        slot = self.slots[i] = self.slot = self._select(prompt)
        self.last_used[i], self.seen = self.seen, self.seen + 1
        lcp = slot.memory.common_prefix(prompt) if slot.memory is not None else 0
        match = min(lcp, n - 1)
        if self.recurrent:
            hit, kept = self._restore(slot, lcp, n)
        else:
            hit = kept = match  # attention-only memory truncates at any position
        slot.checkpoints = [c for c in slot.checkpoints if c <= hit]
        slot.ever = [q for q in slot.ever if q <= lcp]
        chunks = self._prefill(slot, hit, n)
        chunks += [1] * max(sim.num_output_tokens - 1, 0)
        slot.memory = memory_sequence(sim, prompt)
        return match_result(
            sim.request_id, n, hit_tokens=hit, kept_tokens=kept, match_tokens=match,
            chunks=tuple(chunks),
        )  # fmt: skip

    def _pick(self, prompt: Sequence) -> int:
        """The slot llama-server gives the request (all are idle in a serial replay): the
        one whose memory shares the longest prefix with it, if that is more than
        SLOT_SIMILARITY of the prompt; else the least recently used (ties: the lowest)."""
        best, best_lcp = None, 0
        for i, slot in enumerate(self.slots):
            lcp = slot.memory.common_prefix(prompt) if slot.memory is not None else 0
            if lcp > best_lcp and lcp / prompt.length > SLOT_SIMILARITY:
                best, best_lcp = i, lcp
        if best is not None:
            return best
        return min(range(len(self.slots)), key=lambda i: (self.last_used[i], i))

    def _select(self, prompt: Sequence) -> Slot:
        """The state the request starts from: the slot's, or with a host cache (when the slot
        would keep too little of its memory) the best cached one, the slot saved first."""
        slot, cache = self.slot, self.cache
        if cache is None:
            return slot
        lcp = slot.memory.common_prefix(prompt) if slot.memory is not None else 0
        if slot.tokens and lcp / prompt.length > SLOT_SIMILARITY and lcp / slot.tokens >= KEEP_SAVE:
            return slot  # chosen by similarity and keeps enough: no cache update
        cache.save(slot)
        chosen = cache.load(slot, prompt)
        cache.trim()
        return chosen

    def _restore(self, slot: Slot, lcp: int, n: int) -> tuple[int, int]:
        """(hit, hit had no checkpoint been dropped) on a recurrent/hybrid memory.

        The live state is usable only when the prompt extends the whole memory; otherwise
        the newest checkpoint at or below the limit (at least one prompt token must remain to
        compute, so a full match may use a checkpoint one token short of it).
        """
        if lcp == 0:
            return 0, 0
        limit = lcp if lcp < n else lcp - 1
        if slot.memory.length <= limit:
            return lcp, lcp
        hit = max((c for c in slot.checkpoints if c <= limit), default=0)
        kept = max((q for q in slot.ever if q <= limit), default=0)
        return hit, max(hit, kept)

    def _prefill(self, slot: Slot, start: int, n: int) -> list[int]:
        """Batches of n_batch from `start`, broken at n - min(n_batch, 4 + n_ubatch) and n - 4;
        a checkpoint of the state at a batch's start is taken before it runs when the batch
        ends within n_ubatch of the prompt end, spaced by more than min_step."""
        chunks = []
        pos = start
        stops = [n - off for off in self.end_offsets]
        while pos < n:
            end = min(pos + self.n_batch, n)
            end = min([s for s in stops if pos < s < end] + [end])
            if self.recurrent and pos > 0 and (end == n or n < end + self.n_ubatch):
                self._checkpoint(slot, pos)
            chunks.append(end - pos)
            pos = end
        return chunks

    def _checkpoint(self, slot: Slot, pos: int) -> None:
        ckpts = slot.checkpoints
        if ckpts and pos <= ckpts[-1] + self.min_step:
            return
        while len(ckpts) >= self.max_checkpoints:
            ckpts.pop(0)  # FIFO: the oldest goes first
        ckpts.append(pos)
        slot.ever.append(pos)


def replay(
    requests: Iterable[SimRequest], policy: Policy, *, num_groups: dict[str, int] | None = None
) -> Iterator[SimResult]:
    """Replay `requests` (arrival order, one replica) under llama-server checkpoints.
    `num_groups` is accepted for a uniform signature; a slot has no block pool."""
    return LlamacppReplay(policy).run(requests)


def hit_alignment(policy: Policy) -> int:
    """Token-level: a slot reuses any common prefix length (block_size plays no part)."""
    return 1
