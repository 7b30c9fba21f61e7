"""A small fake fleet for the router tests: loads and cached prefixes set by hand."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from analyzer.sim.routers.base import ReplicaLoad, Request


def load(
    waiting: int = 0,
    running: int = 0,
    waiting_tokens: int = 0,
    used_blocks: int = 0,
    total_blocks: int | None = 100,
) -> ReplicaLoad:
    return ReplicaLoad(waiting, running, waiting_tokens, used_blocks, total_blocks)


@dataclass
class FakeView:
    """`FleetView` with per-replica loads and the leading blocks each replica caches."""

    loads: list[ReplicaLoad]
    cached: list[set[int]] = field(default_factory=list)
    now_s: float = 0.0

    @property
    def num_replicas(self) -> int:
        return len(self.loads)

    def load(self, replica: int) -> ReplicaLoad:
        return self.loads[replica]

    def cached_blocks(self, replica: int, blocks: Sequence[int]) -> int:
        held = self.cached[replica] if self.cached else set()
        n = 0
        for b in blocks:
            if b not in held:
                break
            n += 1
        return n


def idle(n: int) -> FakeView:
    return FakeView([load() for _ in range(n)])


def req(
    index: int,
    blocks: Sequence[int] = (),
    *,
    prompt_tokens: int | None = None,
    block_size: int = 16,
    arrival_s: float = 0.0,
    conversation_id: str | None = None,
    trace_replica: str | None = None,
) -> Request:
    """A request whose prompt is `blocks` full blocks (unless `prompt_tokens` says more)."""
    tokens = len(blocks) * block_size if prompt_tokens is None else prompt_tokens
    return Request(
        index=index,
        request_id=f"r{index}",
        arrival_s=arrival_s,
        prompt_tokens=tokens,
        output_tokens=8,
        blocks=tuple(blocks),
        block_size=block_size,
        conversation_id=conversation_id,
        trace_replica=trace_replica,
        namespace=(block_size, None, None),
    )


def chain(start: int, n: int) -> tuple[int, ...]:
    """`n` block ids standing for one prefix chain (ids start, start+1, ...)."""
    return tuple(range(start, start + n))
