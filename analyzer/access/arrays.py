"""Lists of per-request arrays as a few flat buffers, for workers (pickling, Ray's object
store) instead of one object per request."""

from __future__ import annotations

import numpy as np


def pack_arrays(arrays: list[np.ndarray | None]) -> dict:
    """A list of 1-d arrays (or None) as one flat array + offsets per dtype: pickles (and
    travels to Ray's object store) as a few buffers instead of one object per request."""
    packed: dict = {"n": len(arrays), "parts": []}
    dtypes = sorted({a.dtype.str for a in arrays if a is not None})
    for dtype in dtypes:
        rows = np.asarray(
            [i for i, a in enumerate(arrays) if a is not None and a.dtype.str == dtype],
            dtype=np.int64,
        )
        chosen = [arrays[i] for i in rows]
        offsets = np.zeros(len(chosen) + 1, dtype=np.int64)
        np.cumsum([a.shape[0] for a in chosen], out=offsets[1:])
        flat = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.dtype(dtype))
        packed["parts"].append((rows, offsets, flat))
    return packed


def unpack_arrays(packed: dict) -> list[np.ndarray | None]:
    out: list[np.ndarray | None] = [None] * packed["n"]
    for rows, offsets, flat in packed["parts"]:
        for k, i in enumerate(rows.tolist()):
            out[i] = flat[offsets[k] : offsets[k + 1]]
    return out


def joined(
    firsts: list[np.ndarray | None], seconds: list[np.ndarray | None], *, drop_last: int
) -> tuple[np.ndarray, np.ndarray]:
    """(flat, int64 offsets) of each row's `firsts[i]` followed by `seconds[i]` without its
    last `drop_last` values (None: nothing), in one concatenation. The inserted sequences
    of `hpa match` (prompt + output, or hash ids) and of the replay's L1/L2 (prompt + output
    but the sampled last token) are both this."""
    pieces: list[np.ndarray] = []
    lens = np.zeros(len(firsts), dtype=np.int64)
    for i, (first, second) in enumerate(zip(firsts, seconds, strict=True)):
        if first is not None:
            pieces.append(first)
            lens[i] += len(first)
        if second is not None and len(second) > drop_last:
            pieces.append(second[: len(second) - drop_last])
            lens[i] += len(second) - drop_last
    offsets = np.zeros(len(firsts) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    flat = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
    return flat, offsets
