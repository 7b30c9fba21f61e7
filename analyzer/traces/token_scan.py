"""The token-id arrays of JSON Lines, read by a compiled scanner before the JSON parser.

Token ids are nine tenths of a token trace's bytes, and the part general JSON parsers are
slowest at. `strip_token_arrays` reads the arrays of the top-level keys in TOKEN_KEYS out
of a batch of lines in one compiled pass and leaves `[]` in their place, so the JSON
parser reads a body a tenth the size; the arrays come back as Arrow list columns.

It reads only what it can prove is a JSON array of integers under a top-level key spelled
without escapes. Anything else in such an array (a fraction, an exponent, a leading zero,
past int64, a stray byte), a key given twice, an escaped top-level key, a raw
newline in a string, or a string the scan cannot close gives None: the caller parses the
batch as before, and that path rejects what is wrong with its line and reason. The pass
is a C loop (`token_scan_loop.c`, built with the package); a package built without a C
compiler always gives None, and ingests the same records, only slower.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from analyzer.pages import plain_empty

try:  # the C loop, built with the package (setup.py)
    from analyzer.traces import token_scan_loop
except ImportError:  # pragma: no cover - built without a C compiler: the parser reads all
    token_scan_loop = None

TOKEN_KEYS = ("prompt_token_ids", "output_token_ids", "block_hash_ids")
NUM_ID_KEYS = 2  # the first keys hold token ids (stored as int32), the last hash ids (int64)
# Wider integers go to the parsers, which send them to the exact path (a token id past
# int32 is out of range there; a hash id past int64 is read exactly, then rejected).
_TYPES = (pa.int32(), pa.int32(), pa.int64())


@dataclass(frozen=True)
class Stripped:
    """A batch with its token arrays read out: `body` holds `[]` where each array was, and
    `columns[key]` is one list value per line (null where the line has no array): int32
    for token ids, int64 for hash ids."""

    body: bytes
    columns: dict[str, pa.ListArray]


def strip_token_arrays(body: bytes, num_lines: int) -> Stripped | None:
    """`body` (whole lines, each ending in a newline) with its token arrays read out, or
    None where the scan cannot vouch for them (see the module doc)."""
    scan = _compiled()
    if scan is None or not body:
        return None
    buf = np.frombuffer(body, dtype=np.uint8)
    # Scratch on plain pages: a fresh process's first touches of huge pages waited on memory
    # compaction (70 M tokens: the kernel's 0.9-1.0 s became 1.2-1.5 s; see analyzer.pages).
    out = plain_empty(buf.size, np.uint8)
    # Token ids straight into the stored width (int32: the cast from int64 cost a copy and
    # a range check of every id); hash ids in int64. One row per key, in line order; pages
    # never written cost no memory, and each column keeps its row (no copy).
    most = buf.size // 2 + 1
    ids = plain_empty((NUM_ID_KEYS, most), np.int32)
    hashes = plain_empty(most, np.int64)
    num_values = np.zeros(len(TOKEN_KEYS), dtype=np.int64)
    count = np.full((len(TOKEN_KEYS), num_lines), -1, dtype=np.int64)  # -1: no array
    size = scan(buf, _KEYS, _KEY_STARTS, out, ids, hashes, num_values, count)
    if size < 0:
        return None
    columns = {}
    for k, key in enumerate(TOKEN_KEYS):
        present = count[k] >= 0
        if not present.any():
            columns[key] = pa.nulls(num_lines, pa.list_(_TYPES[k]))
            continue
        offsets = np.zeros(num_lines + 1, dtype=np.int32)
        np.cumsum(np.maximum(count[k], 0), out=offsets[1:])
        values = ids[k] if k < NUM_ID_KEYS else hashes
        columns[key] = pa.ListArray.from_arrays(
            pa.array(offsets), pa.array(values[: num_values[k]]), mask=pa.array(~present)
        )
    return Stripped(out[:size].tobytes(), columns)


_KEYS = np.frombuffer(b"".join(k.encode() for k in TOKEN_KEYS), dtype=np.uint8)
_KEY_STARTS = np.cumsum([0, *(len(k) for k in TOKEN_KEYS)]).astype(np.int64)


def _compiled():
    """The C loop (`token_scan_loop.strip`), or None where the package was built without a C
    compiler (every batch then goes to the JSON parser)."""
    return None if token_scan_loop is None else token_scan_loop.strip
