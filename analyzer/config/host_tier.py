"""The host KV tier's figures (vLLM 0.33's OffloadingConnector with its CPU backend;
../shared/reference/kv-offload.md sections 2.1 and 5): how many equal-size slots a host budget
holds, and how fast a load crosses the interconnect.

Slots (vLLM `CPUOffloadingSpec.__init__`): one chunk of `blocks_per_chunk` GPU blocks of one
KV-cache group per slot, whatever the group, sized for the GPU pool's block stride on every
worker and rounded up to a 4 KiB page:

    chunk_bytes = round_up(bytes_per_block / world_size x world_size x blocks_per_chunk, 4096)
    slots       = host bytes // chunk_bytes

    qwen3.5-4b at 16-token blocks: 524,288 B a block -> 0.125 GiB holds 256 slots

The load's bandwidth is a number of GB/s (10^9 bytes per second, one way, host to device)
or the name of an interconnect in `INTERCONNECTS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.errors import ConfigError

GIB = 2**30
PAGE_BYTES = 4096  # vLLM's BLOCK_SIZE_ALIGNMENT for the shared host region


@dataclass(frozen=True)
class Interconnect:
    """One host-to-device link: its one-way bandwidth a KV load sees, and where it is from."""

    name: str
    h2d_gbps: float
    source: str


_ROWS = (
    Interconnect(
        "pcie5",
        50.0,
        "vLLM blog 2026-01-08 (KV offloading connector): H100 + Sapphire Rapids, one "
        "direction, DMA and copy kernel both about 50 GB/s at 2 MB blocks",
    ),
    Interconnect(
        "pcie4",
        25.0,
        "half of PCIe 5 x16 (kv-offload.md section 5; inferred, not measured)",
    ),
    Interconnect(
        "nvlink-c2c",
        400.0,
        "GH200 NVLink-C2C, 900 GB/s both ways; about 400 GB/s one way is inferred (no "
        "measured vLLM offload figure; kv-offload.md section 5)",
    ),
)
INTERCONNECTS: dict[str, Interconnect] = {row.name: row for row in _ROWS}
DEFAULT_INTERCONNECT = "pcie5"


def bandwidth_gbps(value: float | str) -> float:
    """GB/s of a `host_bandwidth_gbps` value: a number as is, or an interconnect's row."""
    if isinstance(value, str):
        row = INTERCONNECTS.get(value)
        if row is None:
            raise ConfigError(
                f"policy key 'host_bandwidth_gbps': unknown interconnect {value!r}; known: "
                f"{', '.join(INTERCONNECTS)} (or a number of GB/s)"
            )
        return row.h2d_gbps
    return float(value)


def chunk_bytes(bytes_per_block: int, world_size: int = 1, blocks_per_chunk: int = 1) -> int:
    """Bytes of one host slot: the pool's block stride on every worker, `blocks_per_chunk`
    blocks, rounded up to a 4 KiB page (vLLM `CPUOffloadingSpec`)."""
    per_worker = bytes_per_block // world_size
    raw = per_worker * world_size * blocks_per_chunk
    return -(-raw // PAGE_BYTES) * PAGE_BYTES


def host_slots(gib: float, slot_bytes: int) -> int:
    """Slots a host budget of `gib` GiB holds (`cpu_bytes_to_use // kv_bytes_per_chunk`)."""
    return int(gib * GIB) // slot_bytes


@dataclass(frozen=True)
class NeverStored:
    """One kind of what a host tier never stored: its replay_requests column, how the
    report says it, and the policy lever that would have stored it."""

    kind: str
    column: str
    words: str
    lever: str


# What a host tier never stored, by kind (docs/definitions.md#the-host-kv-tier), in the order
# the lookups that tell them apart add keys; their sum is `host_never_stored_tokens`.
NEVER_STORED = (
    NeverStored(
        "no_slot",
        "host_never_stored_no_slot_tokens",
        "dropped for want of a slot",
        "host_tier_gib (a larger tier)",
    ),
    NeverStored(
        "decode",
        "host_never_stored_decode_tokens",
        "past a prompt under prompt-only",
        "offload_prompt_only false",
    ),
    NeverStored(
        "sparse",
        "host_never_stored_sparse_tokens",
        "with no sparse state kept",
        "retention_interval (Mamba checkpoints), the sliding window",
    ),
)


def never_stored_words(row: dict) -> str:
    """'N never stored (a dropped for want of a slot, b past a prompt under prompt-only,
    c with no sparse state kept)' from a row of sums, naming the kinds above 0 (a kind the row
    lacks: 0); '0 never stored' alone."""
    total = row["host_never_stored_tokens"] or 0
    kinds = [(row.get(k.column) or 0, k.words) for k in NEVER_STORED]
    named = ", ".join(f"{tokens:,} {words}" for tokens, words in kinds if tokens)
    return f"{total:,} never stored" + (f" ({named})" if named else "")
