"""chwbl: KubeAI's PrefixHash strategy, consistent hashing with bounded loads.

Follows substratusai/kubeai `internal/loadbalancer/balance_chwbl.go` (commit 2f32ef49,
2025-07-06): chwblGetAddr, chwblSearch, chwblLoadOK; `internal/loadbalancer/group.go`
getBestAddr (key = adapter + request prefix; in-flight +1 when chosen, -1 when done);
defaults from `api/k8s/v1/model_types.go` PrefixHash (meanLoadFactor 125, replication 256,
prefixCharLength 100).

    ring: `replication` points per endpoint, sorted by hash
    start at the first point whose hash >= hash(key) (wrapping to the first point)
    walk every point clockwise; the first endpoint with
        total_inflight == 0  or  inflight[e] <= (total_inflight + 1) / n * load_factor
    wins; if none does, the endpoint at the starting point.

The "+1" stands for the new request in the mean only; the endpoint's own load is compared
as is (`load <= threshold`, not `load + 1`).

hpa's model: points hash f"{replica}-{i}" and the key is the cache namespace plus the first
chwbl_prefix_blocks block ids (upstream: xxhash64 of name+i, and of adapter + the first
prefixCharLength characters of the prompt); the 64-bit hash is blake2b (deterministic
across runs). A prompt with fewer full blocks keys on the blocks it has. In-flight counts
are router-local (route +1, on_finished -1); no randomness.
"""

from __future__ import annotations

import bisect
import hashlib
from typing import Any

from analyzer.sim.routers import option
from analyzer.sim.routers.base import FleetView, Request, Router, Ties


def hash64(text: str) -> int:
    """A deterministic 64-bit hash (blake2b, 8 bytes)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def load_ok(load: int, total_load: int, n: int, load_factor: float) -> bool:
    """chwblLoadOK: may an endpoint with `load` in flight take one more request?"""
    if total_load == 0:
        return True
    return float(load) <= float(total_load + 1) / n * load_factor


class ChwblRouter(Router):
    """Bounded-load consistent hashing on a prompt-prefix key."""

    def __init__(self, num_replicas: int, knobs: dict[str, Any], ties: Ties) -> None:
        super().__init__(num_replicas, knobs, ties)
        self.load_factor = float(option(knobs, "chwbl_load_factor"))
        self.prefix_blocks = int(option(knobs, "chwbl_prefix_blocks"))
        replication = int(option(knobs, "chwbl_replication"))
        points = {}
        for r in range(num_replicas):
            for i in range(replication):
                points[hash64(f"{r}-{i}")] = r  # a colliding point keeps the later one
        self.ring_hashes = sorted(points)
        self.ring_owners = [points[h] for h in self.ring_hashes]
        self.inflight = [0] * num_replicas
        self.total = 0

    def key_hash(self, request: Request) -> int:
        return hash64(repr((request.namespace, tuple(request.blocks[: self.prefix_blocks]))))

    def pick(self, key_hash: int) -> int:
        """chwblGetAddr for a key's hash."""
        start = bisect.bisect_left(self.ring_hashes, key_hash)
        if start >= len(self.ring_hashes):
            start = 0
        n, size = self.num_replicas, len(self.ring_hashes)
        for step in range(size):
            owner = self.ring_owners[(start + step) % size]
            if load_ok(self.inflight[owner], self.total, n, self.load_factor):
                return owner
        return self.ring_owners[start]

    def route(self, request: Request, view: FleetView) -> int:
        chosen = self.pick(self.key_hash(request))
        self.inflight[chosen] += 1
        self.total += 1
        return chosen

    def on_finished(self, request: Request, replica: int, t_s: float) -> None:
        self.inflight[replica] -= 1
        self.total -= 1


ROUTER = ChwblRouter
