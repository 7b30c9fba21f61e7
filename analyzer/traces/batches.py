"""Batches of stored rows: a vectorised fast path over Arrow and the exact per-record path.

`fast_rows` accepts an Arrow batch only when every row provably passes
`records.validate_record`; it returns None otherwise and the caller re-reads the batch
record by record, so every reject carries the exact reason of the per-record path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from analyzer.traces.records import (
    ROW_SCHEMA,
    STRING_FIELDS,
    TIMESTAMP_MAX_S,
    TIMESTAMP_MIN_S,
    TOKEN_ID_LIMIT,
    RecordError,
    validate_record,
)

RAW_EXCERPT_CHARS = 200

# What the fast path reads: every known field with one fixed JSON type.
FAST_INPUT_SCHEMA = pa.schema(
    [(name, pa.string()) for name in STRING_FIELDS]
    + [
        ("replica", pa.string()),
        ("timestamp", pa.float64()),
        ("ttft_ms", pa.float64()),
        ("prompt_token_ids", pa.list_(pa.int64())),
        ("output_token_ids", pa.list_(pa.int64())),
        ("block_hash_ids", pa.list_(pa.int64())),
        ("block_size", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("cached_tokens", pa.int64()),
    ]
)


@dataclass(frozen=True)
class Reject:
    """One record that was not stored: where it was, which field, and why."""

    line_no: int
    field: str | None
    reason: str
    raw_excerpt: str


def rejects_table(rejects: list[Reject], source_id: int, path: str) -> pa.Table:
    """`rejects` as rows of the `rejects` table, in its column order (one INSERT stores
    them: DuckDB's executemany runs its statement once a row, 3.7 ms a reject)."""
    n = len(rejects)
    texts = {k: pa.array([getattr(r, k) for r in rejects], pa.string()) for k in _REJECT_TEXTS}
    return pa.table(
        {
            "source_id": pa.array([source_id] * n, pa.int32()),
            "path": pa.array([path] * n, pa.string()),
            "line_no": pa.array([r.line_no for r in rejects], pa.int64()),
            **texts,
        }
    )


_REJECT_TEXTS = ("field", "reason", "raw_excerpt")


@dataclass(frozen=True)
class SourceInfo:
    """What ingest records in `sources` about a reader's format.

    block_size_tokens: the trace's hash block size in tokens (None for token-id traces);
    provenance: one line naming the public trace or format, its URL and licence;
    timestamps: how the adapter makes the timestamps the trace does not give as they are
    (None: the trace's own), a caveat for every figure that depends on arrival times.
    """

    block_size_tokens: int | None = None
    provenance: str | None = None
    timestamps: str | None = None


@dataclass
class Batch:
    """Rows to store (ROW_SCHEMA), rejects, and how many records were read."""

    rows: pa.Table
    rejects: list[Reject] = field(default_factory=list)
    # Input lines that are not records at all (a server log's other messages): counted so
    # ingest can report them, neither stored nor rejected.
    num_skipped: int = 0
    # A server log's verdict, on its last batch: its token lists may be cut at this many ids
    # (vLLM's --max-log-len); ingest flags the prompts of exactly that length. None: whole.
    cut_at_tokens: int | None = None

    @property
    def num_read(self) -> int:
        return self.rows.num_rows + len(self.rejects)


def excerpt(raw: bytes | str) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return text[:RAW_EXCERPT_CHARS]


def exact_batch(items: list[tuple[int, Any, bytes | str]]) -> Batch:
    """Validate records one by one; items are (line_no, decoded object or RecordError, raw)."""
    rows: list[dict[str, Any]] = []
    rejects: list[Reject] = []
    for line_no, obj, raw in items:
        try:
            if isinstance(obj, RecordError):
                raise obj
            rows.append(validate_record(obj, line_no))
        except RecordError as err:
            rejects.append(Reject(line_no, err.field, err.reason, excerpt(raw)))
    return Batch(pa.Table.from_pylist(rows, schema=ROW_SCHEMA), rejects)


def fast_rows(table: pa.Table, line_nos: pa.Array) -> pa.Table | None:
    """Stored rows from a batch typed as FAST_INPUT_SCHEMA, or None if any row is invalid."""
    table = _complete(table)
    if table is None or not _all_valid(table):
        return None
    col = table.column
    prompt_tokens = _prompt_tokens(table)
    output_tokens = pc.coalesce(
        col("output_tokens"), pc.list_value_length(col("output_token_ids")).cast(pa.int64())
    )
    family = col("prompt_family")
    columns = {
        "line_no": line_nos,
        "timestamp_s": col("timestamp"),
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "prompt_family_source": pc.if_else(
            pc.is_valid(family), pa.scalar("trace"), pa.scalar(None, pa.string())
        ),
        "extra": pa.nulls(table.num_rows, pa.string()),
    }
    arrays = [
        columns[name].cast(typ) if name in columns else col(name).cast(typ)
        for name, typ in zip(ROW_SCHEMA.names, ROW_SCHEMA.types, strict=True)
    ]
    return pa.Table.from_arrays(arrays, schema=ROW_SCHEMA)


def _prompt_tokens(t: pa.Table) -> pa.ChunkedArray:
    """Each row's prompt length: its token ids, else prompt_tokens, else ids x block size."""
    col = t.column
    hash_tokens = pc.coalesce(
        col("prompt_tokens"),
        pc.multiply(
            pc.list_value_length(col("block_hash_ids")).cast(pa.int64()), col("block_size")
        ),
    )
    return pc.if_else(
        pc.is_valid(col("prompt_token_ids")),
        pc.list_value_length(col("prompt_token_ids")).cast(pa.int64()),
        hash_tokens,
    )


# Id lists a reader may hand over already in their stored width (the token scanner's int32
# ids): kept as they are rather than widened to the input type and narrowed back.
_STORED_TYPES = {
    name: ROW_SCHEMA.field(name).type for name in ("prompt_token_ids", "output_token_ids")
}


def _complete(table: pa.Table) -> pa.Table | None:
    """The batch with every fast-path column present and typed (token-id lists in their
    input or their stored type); None if it has others."""
    if set(table.column_names) - set(FAST_INPUT_SCHEMA.names):
        return None  # unknown fields go to `extra`, which the exact path builds
    arrays = []
    for f in FAST_INPUT_SCHEMA:
        if f.name not in table.column_names:
            arrays.append(pa.nulls(table.num_rows, f.type))
            continue
        column = table.column(f.name)
        if column.type != f.type and column.type != _STORED_TYPES.get(f.name):
            if not _same_kind(column.type, f.type):
                return None  # e.g. a number where text belongs: the exact path rejects it
            try:
                column = column.cast(f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
        arrays.append(column)
    return pa.Table.from_arrays(arrays, names=FAST_INPUT_SCHEMA.names)


def _same_kind(found: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether a typed column (Parquet) holds what JSON Lines would accept for the field, so
    that a cast only widens it: text for text, integers (not booleans) for integers and id
    lists, numbers for numbers. Anything else takes the exact path, which names the field."""
    if pa.types.is_dictionary(found):
        found = found.value_type
    if pa.types.is_string(wanted):
        return pa.types.is_string(found) or pa.types.is_large_string(found)
    if pa.types.is_integer(wanted):
        return pa.types.is_integer(found)
    if pa.types.is_floating(wanted):
        return pa.types.is_integer(found) or pa.types.is_floating(found)
    if pa.types.is_list(wanted):
        is_list = pa.types.is_list(found) or pa.types.is_large_list(found)
        return is_list and pa.types.is_integer(found.value_type)
    return False


def _all_valid(t: pa.Table) -> bool:
    """True when every row would pass `validate_record` (checked column by column)."""
    col = t.column
    rid = col("request_id")
    if rid.null_count or _any(pc.equal(pc.binary_length(rid), 0)):
        return False
    ids, hashes = col("prompt_token_ids"), col("block_hash_ids")
    if not _all(pc.xor(pc.is_valid(ids), pc.is_valid(hashes))):
        return False
    for name in ("timestamp", "ttft_ms"):
        if not _all_or_null(pc.is_finite(col(name))):
            return False
    low, high = pc.min_max(col("timestamp")).values()
    if low.is_valid and not (TIMESTAMP_MIN_S <= low.as_py() and high.as_py() <= TIMESTAMP_MAX_S):
        return False
    if _any(pc.less(col("ttft_ms"), 0)):
        return False
    return (
        _ids_ok(ids, allow_empty=False)
        and _ids_ok(col("output_token_ids"), allow_empty=True)
        and _hashes_ok(t)
        and _counts_ok(t)
    )


def _ids_ok(ids: pa.ChunkedArray, *, allow_empty: bool) -> bool:
    if ids.null_count == len(ids):
        return True
    if not allow_empty and _any(pc.equal(pc.list_value_length(ids), 0)):
        return False
    flat = pc.list_flatten(ids)
    if flat.null_count:
        return False
    if len(flat) == 0:
        return True
    lo_hi = pc.min_max(flat)
    return lo_hi["min"].as_py() >= 0 and lo_hi["max"].as_py() < TOKEN_ID_LIMIT


def _hashes_ok(t: pa.Table) -> bool:
    hashes = t.column("block_hash_ids")
    if hashes.null_count == len(hashes):
        return True
    if _any(pc.equal(pc.list_value_length(hashes), 0)) or pc.list_flatten(hashes).null_count:
        return False
    needs_size = pc.and_kleene(pc.is_valid(hashes), pc.is_null(t.column("block_size")))
    return not _any(needs_size)


def _counts_ok(t: pa.Table) -> bool:
    """Counts in range and consistent with the lists (cached_tokens <= prompt length)."""
    col = t.column
    counts = (("block_size", 1), ("prompt_tokens", 1), ("output_tokens", 0), ("cached_tokens", 0))
    for name, minimum in counts:
        if _any(pc.less(col(name), minimum)) or _any(pc.greater_equal(col(name), TOKEN_ID_LIMIT)):
            return False
    ids_len = pc.list_value_length(col("prompt_token_ids"))
    if _any(pc.not_equal(col("prompt_tokens"), ids_len)):
        return False
    hash_len = pc.list_value_length(col("block_hash_ids"))
    size = col("block_size")
    needed = pc.divide(pc.add(col("prompt_tokens"), pc.subtract(size, 1)), size)
    if _any(pc.not_equal(needed, hash_len)):
        return False
    implied = pc.multiply(hash_len.cast(pa.int64()), size)
    if _any(
        pc.and_kleene(pc.is_null(col("prompt_tokens")), pc.greater_equal(implied, TOKEN_ID_LIMIT))
    ):
        return False
    if _any(pc.greater(col("cached_tokens"), _prompt_tokens(t))):
        return False
    out_len = pc.list_value_length(col("output_token_ids"))
    return not _any(pc.not_equal(col("output_tokens"), out_len))


def _any(mask) -> bool:
    return bool(pc.any(mask).as_py())


def _all(mask) -> bool:
    return bool(pc.all(mask).as_py())


def _all_or_null(mask) -> bool:
    return not _any(pc.invert(mask))
