"""vLLM 0.33's host KV tier, the slot pool and its eviction (vLLM `CPUOffloadingManager` with
`LRUCachePolicy` or `ARCCachePolicy`; ../shared/reference/kv-offload.md section 2.6).

A key is a pool key (`hash id x groups + group id`: the chunk-end block hash of one KV-cache
group); every key takes one of `num_chunks` equal slots. A key's transfer count `ref`: -1 while
its store is in flight (readable and evictable only once it completes), 0 resident and idle,
n > 0 while n loads read it. Only idle keys are evicted.

    prepare_store(keys)  new keys take slots (evicting idle ones, never one of `keys`);
                         None when too few are idle: nothing is stored (the caller retries)
    complete_store       the copy landed: the key is readable
    prepare_load / complete_load   pin and unpin the keys a load reads
    finish(access)       the request ended: its recency is committed (request-scoped)

Each request's `Access` records the keys it saw, stored and reused, in the manager's terms.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from analyzer.config.host_tier import bandwidth_gbps, chunk_bytes, host_slots
from analyzer.config.memory import bytes_per_block
from analyzer.errors import ConfigError

MISS, HIT, PENDING = 0, 1, 2


@dataclass(frozen=True)
class HostTierSpec:
    """A host tier as the replay runs it: `num_chunks` slots of one GPU block each,
    `policy` lru or arc, `prompt_only` (decode tokens never stored), the load's one-way
    bandwidth, and the bytes one key's load moves per worker (None: no model to say)."""

    num_chunks: int
    policy: str = "lru"
    prompt_only: bool = True
    bandwidth_gbps: float = 50.0
    load_bytes_per_key: int | None = None

    def load_s(self, keys: int) -> float:
        """Seconds a load of `keys` keys takes on the link (0 when the bytes are unknown)."""
        if self.load_bytes_per_key is None:
            return 0.0
        return keys * self.load_bytes_per_key / (self.bandwidth_gbps * 1e9)


class Access:
    """One request's accesses (vLLM `_RequestCacheAccess` and the LRU's request rank)."""

    __slots__ = ("seen", "seen_set", "position", "inserted", "reused", "store_misses", "rank")

    def __init__(self) -> None:
        self.seen: list[int] = []  # first-seen order
        self.seen_set: set[int] = set()
        self.position: dict[int, tuple[int, int]] = {}  # key -> (end token, group)
        self.inserted: set[int] = set()
        self.reused: set[int] = set()
        self.store_misses: set[int] = set()
        self.rank: int | None = None

    def head_to_tail(self) -> list[int]:
        """Every key it saw, by position (ties: group order), head first."""
        return sorted(self.seen, key=self.position.__getitem__)


class HostTier:
    """The slot pool: keys, their transfer counts, the eviction policy."""

    def __init__(self, spec: HostTierSpec) -> None:
        self.capacity = spec.num_chunks
        self.ref: dict[int, int] = {}
        self.num_idle = 0  # resident keys with ref 0
        self.policy = POLICIES[spec.policy](self)
        self.stored_ever: set[int] = set()  # every key a store completed for
        self.num_evicted = 0
        self.num_failed_stores = 0
        built = _BUILT.get()
        if built is not None:
            built.append(self)

    def lookup(self, key: int) -> int:
        ref = self.ref.get(key)
        if ref is None:
            return MISS
        return PENDING if ref < 0 else HIT

    def prepare_store(self, keys: list[int], access: Access) -> list[int] | None:
        ref = self.ref
        to_store = [k for k in keys if k not in ref]
        ready = [k for k in keys if ref.get(k, -1) >= 0]
        misses = [k for k in to_store if k not in access.store_misses]
        if misses:
            self.policy.on_store_miss(misses)
            access.store_misses.update(misses)
        recorded = set(to_store).union(ready)
        see(access, [k for k in keys if k in recorded], self.policy)
        access.reused.update(k for k in ready if k not in access.inserted)
        if not to_store:
            return []
        need = len(to_store) - (self.capacity - len(ref))
        if need > 0:
            evicted = None if need > self.num_idle else self.policy.evict(need, set(keys))
            if evicted is None:
                self.num_failed_stores += 1
                return None
            for key in evicted:
                del ref[key]
            self.num_idle -= len(evicted)
            self.num_evicted += len(evicted)
        for key in to_store:
            ref[key] = -1
            self.policy.insert(key, access)
        access.inserted.update(to_store)
        return to_store

    def complete_store(self, keys: list[int]) -> None:
        ref = self.ref
        for key in keys:
            if ref.get(key) == -1:
                ref[key] = 0
                self.num_idle += 1
                self.stored_ever.add(key)
                self.policy.mark_idle(key)

    def prepare_load(self, keys: list[int], access: Access) -> None:
        ref = self.ref
        for key in keys:
            if ref[key] == 0:
                self.policy.mark_busy(key)
                self.num_idle -= 1
            ref[key] += 1
        see(access, keys, self.policy)
        access.reused.update(k for k in keys if k not in access.inserted)

    def complete_load(self, keys: list[int]) -> None:
        ref = self.ref
        for key in keys:
            ref[key] -= 1
            if ref[key] == 0:
                self.num_idle += 1
                self.policy.mark_idle(key)

    def finish(self, access: Access) -> None:
        """The request finished: vLLM `on_request_finished`, once."""
        order = access.head_to_tail()
        self.policy.on_finished(order, access.inserted - access.reused, access.reused)


_BUILT: ContextVar[list[HostTier] | None] = ContextVar("hpa_host_tiers", default=None)


@contextmanager
def tiers_built() -> Iterator[list[HostTier]]:
    """The host tiers that the replays made inside build in this process, in a list (an
    enclosing `tiers_built` gets them too)."""
    outer, built = _BUILT.get(), []
    token = _BUILT.set(built)
    try:
        yield built
    finally:
        _BUILT.reset(token)
        if outer is not None:
            outer.extend(built)


def slots_used(tiers: list[HostTier]) -> int | None:
    """The most slots one of `tiers` took by the replay's end where none evicted a key or
    dropped a store for want of one (None otherwise, or no tier): a tier of at least that
    many slots replays alike, step for step. Without an eviction no key leaves `ref`, so its
    size at the end is the most a store ever asked for, and the capacity is read nowhere
    else (`prepare_store`; ARC's target and ghosts move only after an eviction)."""
    if not tiers or any(t.num_evicted or t.num_failed_stores for t in tiers):
        return None
    return max(len(t.ref) for t in tiers)


def see(access: Access, keys, policy) -> None:
    """Record `keys` (their positions set) as seen by the request; the policy hears of
    those it had not seen before (vLLM `_record_request_cache_access`)."""
    fresh = [k for k in keys if k not in access.seen_set]
    if fresh:
        access.seen.extend(fresh)
        access.seen_set.update(fresh)
        policy.on_access(fresh, access)


class LruPolicy:
    """vLLM `LRUCachePolicy`: ranks (major, minor), the smallest idle rank evicted first. A
    request's keys rank (its request rank, -position) while it runs (tails before heads);
    at its finish all its keys get fresh ranks, tail first, so its head is the newest."""

    def __init__(self, tier: HostTier) -> None:
        # the tier's keys: its dict, not the tier (no reference cycle, so a replay's tier is
        # freed as the replay ends, not at the collector's next full pass)
        self.resident = tier.ref
        self.rank: dict[int, tuple[int, int]] = {}
        self.idle: set[int] = set()
        self.heap: list[tuple[tuple[int, int], int]] = []
        self.counter = 0

    def _request_rank(self, access: Access) -> int:
        if access.rank is None:
            self.counter += 1
            access.rank = self.counter
        return access.rank

    def _push(self, key: int) -> None:
        heapq.heappush(self.heap, (self.rank[key], key))

    def insert(self, key: int, access: Access) -> None:
        self.rank[key] = (self._request_rank(access), -access.position[key][0])

    def on_access(self, keys: list[int], access: Access) -> None:
        major = self._request_rank(access)
        for key in keys:
            if key not in self.resident:
                continue
            rank = (major, -access.position[key][0])
            if self.rank[key] >= rank:
                continue
            self.rank[key] = rank
            if key in self.idle:
                self._push(key)

    def on_store_miss(self, keys: list[int]) -> None:
        return  # a store miss is not resident: its touch changes nothing

    def on_finished(self, order: list[int], inserted_only: set[int], reused: set[int]) -> None:
        for key in reversed(order):
            if key in self.resident:
                self.counter += 1
                self.rank[key] = (self.counter, 0)
                if key in self.idle:
                    self._push(key)

    def mark_idle(self, key: int) -> None:
        self.idle.add(key)
        self._push(key)

    def mark_busy(self, key: int) -> None:
        self.idle.discard(key)

    def evict(self, n: int, protected: set[int]) -> list[int] | None:
        heap, chosen, deferred = self.heap, [], []
        taken: set[int] = set()
        while heap and len(chosen) < n:
            entry = heapq.heappop(heap)
            rank, key = entry
            if key not in self.idle or self.rank.get(key) != rank or key in taken:
                continue
            if key in protected:
                deferred.append(entry)
                continue
            chosen.append(entry)
            taken.add(key)
        for entry in deferred:
            heapq.heappush(heap, entry)
        if len(chosen) < n:
            for entry in chosen:
                heapq.heappush(heap, entry)
            return None
        for _, key in chosen:
            self.idle.discard(key)
            del self.rank[key]
        return [key for _, key in chosen]


class ArcPolicy:
    """vLLM `ARCCachePolicy`: new keys in T1; a key a request reused (loaded, or offered
    again while resident) moves to T2 at the request's finish. Eviction takes T1's oldest
    idle key while |T1| >= the target, else T2's; evicted keys go to the ghost lists B1/B2,
    whose store misses move the target (once per request)."""

    def __init__(self, tier: HostTier) -> None:
        self.resident = tier.ref  # the tier's keys (as LruPolicy keeps them)
        self.capacity = tier.capacity
        self.target = 0.0
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()

    def insert(self, key: int, access: Access) -> None:
        self.t1[key] = None
        self.b1.pop(key, None)
        self.b2.pop(key, None)

    def on_access(self, keys: list[int], access: Access) -> None:
        return

    def on_store_miss(self, keys: list[int]) -> None:
        b1, b2 = self.b1, self.b2
        for key in reversed(keys):
            if key in b1:
                self.target = min(self.target + max(1, len(b2) / len(b1)), self.capacity)
                b1.move_to_end(key)
            elif key in b2:
                self.target = max(self.target - max(1, len(b1) / len(b2)), 0)
                b2.move_to_end(key)

    def on_finished(self, order: list[int], inserted_only: set[int], reused: set[int]) -> None:
        t1, t2 = self.t1, self.t2
        for key in reversed(order):
            if key in inserted_only:
                if key in t1:
                    t1.move_to_end(key)
                elif key in t2:
                    t2.move_to_end(key)
            elif key in reused:
                if key in t1:
                    del t1[key]
                    t2[key] = None
                elif key in t2:
                    t2.move_to_end(key)

    def mark_idle(self, key: int) -> None:
        return

    def mark_busy(self, key: int) -> None:
        return

    def evict(self, n: int, protected: set[int]) -> list[int] | None:
        ref = self.resident

        def next_idle(entries):
            for key in entries:
                if ref[key] == 0 and key not in protected:
                    return key
            return None

        t1_keys, t2_keys = iter(self.t1), iter(self.t2)
        t1_size = len(self.t1)
        chosen: list[tuple[int, bool]] = []
        for _ in range(n):
            key, from_t1 = None, False
            if t1_size >= int(self.target):
                key = next_idle(t1_keys)
                from_t1 = key is not None
            if key is None:
                key = next_idle(t2_keys)
            if key is None:
                key = next_idle(t1_keys)
                if key is None:
                    return None
                from_t1 = True
            if from_t1:
                t1_size -= 1
            chosen.append((key, from_t1))
        for key, from_t1 in chosen:
            if from_t1:
                del self.t1[key]
                self.b1[key] = None
            else:
                del self.t2[key]
                self.b2[key] = None
        for ghost in (self.b1, self.b2):
            for _ in range(len(ghost) - self.capacity):
                ghost.popitem(last=False)
        return [key for key, _ in chosen]


POLICIES = {"lru": LruPolicy, "arc": ArcPolicy}


def host_tier_spec(policy) -> HostTierSpec | None:
    """The policy's host tier (None: none): its slots from `host_tier_chunks`, or from
    `host_tier_gib` and the model preset's bytes per block (analyzer/config/host_tier.py)."""
    gib, chunks = policy.option("host_tier_gib"), policy.option("host_tier_chunks")
    if not gib and chunks is None:
        return None
    if gib and chunks is not None:
        raise ConfigError("policy keys 'host_tier_gib' and 'host_tier_chunks': give one")
    if policy.spec_decode != "none":
        raise ConfigError(
            "policy key 'host_tier_gib': the host tier is not modelled with speculative "
            "decoding (EAGLE groups keep their last chunk back); use spec_decode none"
        )
    unit = policy.hash_block_tokens
    if "mamba" in policy.groups and unit < policy.block_size:
        raise ConfigError(
            "policy key 'host_tier_gib': the host tier's partial tails (a match unit below "
            "the block with a Mamba group) are not modelled; use prefix_match_unit null"
        )
    per_block = bytes_per_block(policy.model, policy.block_size)
    workers = policy.tensor_parallel
    if chunks is None:
        if per_block is None:
            raise ConfigError(
                "policy key 'host_tier_gib': its slots need the model preset's bytes per "
                "block (set model), or give host_tier_chunks"
            )
        chunks = host_slots(gib, chunk_bytes(per_block, workers))
        if chunks == 0:
            raise ConfigError(
                f"policy key 'host_tier_gib': {gib} GiB holds no slot of "
                f"{chunk_bytes(per_block, workers):,} bytes"
            )
    return HostTierSpec(
        num_chunks=chunks,
        policy=policy.option("host_tier_policy"),
        prompt_only=policy.option("offload_prompt_only"),
        bandwidth_gbps=bandwidth_gbps(policy.option("host_bandwidth_gbps")),
        load_bytes_per_key=None if per_block is None else per_block // workers,
    )
