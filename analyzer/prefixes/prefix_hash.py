"""Prefix keys: a 64-bit key for any (sequence, prefix length), in O(1) after one scan.

A sequence u_1..u_n in namespace `ns` has, for every depth k, the polynomial hash

    h_k = seed(ns) * B^k + sum_{t<=k} u_t * B^(k-t)        (mod 2^64, B odd)

and the key is h_k * S for an odd constant S (which moves the low-bit difference between
sibling prefixes into the high bits). Because B is odd it is invertible mod 2^64, so
h_k = B^g * (P_g + c_j), with g the position in the chunk's flat array, P the running
sum of u_g * B^-g over that whole array and c_j one constant per sequence: one multiply
and one cumulative sum per token, shared by every view, make every prefix key available
(`ChunkHash.keys`), and the matcher computes only the keys it needs. Equal prefixes in one
namespace always get equal keys; different ones usually get different keys, and the
matcher verifies every answer, so a collision can cost time but never change a result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analyzer.prefixes.arrays import U64_MAX, Array, ragged_arange, u64, weighted_running_sum

_FMIX_1 = 0xFF51AFD7ED558CCD
_FMIX_2 = 0xC4CEB9FE1A85EC53
_SEED_MIX = 0x9E3779B97F4A7C15
# The odd constant every key is multiplied by last (the fused kernels use it too).
KEY_SPREAD = 0xD6E8FEB86659FD93


@dataclass(frozen=True, kw_only=True)
class HashParams:
    """Constants of the prefix hash. `key_mask` exists so tests can force collisions."""

    base: int = 0x3C9A2C7A0E5AD4B7
    key_mask: int = U64_MAX

    def __post_init__(self) -> None:
        if self.base % 2 == 0 or not 0 < self.base <= U64_MAX:
            raise ValueError("HashParams.base must be an odd 64-bit integer")

    @property
    def base_inverse(self) -> int:
        return pow(self.base, -1, 1 << 64)


DEFAULT_HASH = HashParams()


def fmix64(x: Array, *, xp: Any) -> Array:
    """MurmurHash3's 64-bit finalizer: a bijection that mixes every input bit."""
    x = x ^ (x >> 33)
    x = x * u64(_FMIX_1, xp=xp)
    x = x ^ (x >> 33)
    x = x * u64(_FMIX_2, xp=xp)
    return x ^ (x >> 33)


def namespace_seeds(ns: Array, *, xp: Any) -> Array:
    """A 64-bit seed per namespace id (int64 >= 0); distinct ids give distinct seeds."""
    return fmix64(xp.astype(ns, xp.uint64) * u64(_SEED_MIX, xp=xp) + u64(1, xp=xp), xp=xp)


class PowerTables:
    """B^g and B^-(g-1) for g up to the largest chunk seen, grown on demand and reused."""

    def __init__(self, params: HashParams, *, xp: Any) -> None:
        self.params, self.xp = params, xp
        self.powers = xp.ones(1, dtype=xp.uint64)  # powers[g] = B^g
        self.inv_shifted = xp.asarray([params.base, 1], dtype=xp.uint64)  # [t] = B^-(t-1)

    def ensure(self, size: int) -> None:
        if self.powers.shape[0] >= size:
            return
        xp, size = self.xp, max(size, self.powers.shape[0] * 5 // 4)
        self.powers = powers_of(self.params.base, size, xp=xp)
        head = xp.asarray([self.params.base], dtype=xp.uint64)  # B^-(-1) = B, for a start at 0
        self.inv_shifted = xp.concat([head, powers_of(self.params.base_inverse, size, xp=xp)])


def powers_of(base: int, size: int, *, xp: Any) -> Array:
    """[1, b, b^2, ..., b^(size-1)] mod 2^64: two short scans and one outer product (a
    plain running product is a slow sequential scan)."""
    width = 2048
    rows = -(-size // width)
    low = xp.cumulative_prod(xp.full(width - 1, base, dtype=xp.uint64), include_initial=True)
    step = pow(base, width, 1 << 64)
    high = xp.cumulative_prod(xp.full(rows - 1, step, dtype=xp.uint64), include_initial=True)
    table = xp.reshape(xp.reshape(high, (rows, 1)) * xp.reshape(low, (1, width)), (-1,))
    return table[:size]


class ChunkHash:
    """The running sum of one chunk's flat tokens: any prefix key in O(1), on demand.

    Shared by every view of the chunk; a view only adds its per-sequence constants
    (which carry the namespace seed), so the per-token work is one multiply and one scan.
    """

    def __init__(self, flat: Array, tables: PowerTables, *, xp: Any) -> None:
        self.xp, self.tables, self.params = xp, tables, tables.params
        self.size = int(flat.shape[0])
        tables.ensure(self.size + 1)
        self.running = weighted_running_sum(flat, tables.inv_shifted[1 : self.size + 1], xp=xp)

    def constants(self, starts: Array, ns: Array) -> Array:
        """Per sequence: the constant that adds its namespace seed and removes the running
        sum of everything before it."""
        xp = self.xp
        seeds = namespace_seeds(ns, xp=xp)
        return seeds * xp.take(self.tables.inv_shifted, starts) - xp.take(self.running, starts)

    def keys(self, pos: Array, const: Array) -> Array:
        """Keys of the prefixes ending at flat positions `pos`, of sequences with constants
        `const` (aligned). Sibling prefixes (same prefix, different last token) differ in the
        low bits only; one multiply by an odd constant spreads that into the high bits,
        which the sort (`stable_argsort_u64`) relies on for speed."""
        xp = self.xp
        h = (xp.take(self.running, pos + 1) + const) * xp.take(self.tables.powers, pos)
        keys = h * u64(KEY_SPREAD, xp=xp)
        if self.params.key_mask != U64_MAX:
            keys = keys & u64(self.params.key_mask, xp=xp)
        return keys


def prefix_keys(
    flat: Array, starts: Array, lens: Array, ns: Array, *, params: HashParams, xp: Any
) -> Array:
    """Keys of every prefix of every sequence, aligned with `flat` (sequences contiguous,
    in order). A reference for tests; the matcher asks `ChunkHash` for the keys it needs."""
    seg, local = ragged_arange(lens, xp=xp)
    hasher = ChunkHash(flat, PowerTables(params, xp=xp), xp=xp)
    const = xp.take(hasher.constants(starts, ns), seg)
    return hasher.keys(xp.take(starts, seg) + local, const)
