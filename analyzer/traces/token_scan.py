"""The token-id arrays of JSON Lines, read by a compiled scanner before the JSON parser.

Token ids are nine tenths of a token trace's bytes, and the part general JSON parsers are
slowest at. `strip_token_arrays` reads the arrays of the top-level keys in TOKEN_KEYS out
of a batch of lines in one compiled pass (numba) and leaves `[]` in their place, so the JSON
parser reads a body a tenth the size; the arrays come back as Arrow list columns.

It reads only what it can prove is a JSON array of integers under a top-level key spelled
without escapes. Anything else in such an array (a fraction, an exponent, a leading zero,
past int64, a stray byte), a key given twice, an escaped top-level key, a raw
newline in a string, or a string the scan cannot close gives None: the caller parses the
batch as before, and that path rejects what is wrong with its line and reason. Without
numba it always gives None (numba is a dependency; an environment without it still
ingests, only slower). The kernel compiles on first use (a few seconds, then cached next
to this module), so callers use it on large batches only; an ingest that will scan loads it
in a thread as it starts (`load_early`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cache

import numpy as np
import pyarrow as pa

from analyzer.pages import plain_empty
from analyzer.warmup import Warmup

TOKEN_KEYS = ("prompt_token_ids", "output_token_ids", "block_hash_ids")
NUM_ID_KEYS = 2  # the first keys hold token ids (stored as int32), the last hash ids (int64)
_TYPES = (pa.int32(), pa.int32(), pa.int64())
# Wider integers go to the parsers, which send them to the exact path (a token id past
# int32 is out of range there; a hash id past int64 is read exactly, then rejected).
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


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


def _kernel(buf, keys, key_starts, out, ids, hashes, num_values, count):  # pragma: no cover
    """Bytes written to `out`, or -1: abort (see the module doc). Compiled. Bytes between
    token arrays are copied a run at a time (`mark`: where the pending run starts)."""
    n, o, line, mark = buf.size, 0, 0, 0
    if n == 0 or buf[n - 1] != 10:
        return -1  # not whole lines: _int_array relies on the final newline
    depth, prev, top_object = 0, 10, False
    i = 0
    while i < n:
        c = buf[i]
        if c == 10:  # end of a line: a new JSON value starts
            i += 1
            line += 1
            depth, prev, top_object = 0, 10, False
            continue
        if c == 32 or c == 9 or c == 13:
            i += 1
            continue
        if prev == 10:
            top_object = c == 123
        if c != 34:
            if c == 123 or c == 91:
                depth += 1
            elif c == 125 or c == 93:
                depth -= 1
            i += 1
            prev = c
            continue
        # a string: find its closing quote
        j, escaped = i + 1, False
        while j < n and buf[j] != 34:
            if buf[j] == 10:
                return -1
            if buf[j] == 92:
                escaped = True
                j += 1
            j += 1
        if j >= n:
            return -1
        is_key = depth == 1 and top_object and (prev == 123 or prev == 44)
        k = -1
        if is_key:
            if escaped:
                return -1  # an escaped key might spell a token key: the parser decides
            k = _which_key(buf, i + 1, j, keys, key_starts)
        i = j + 1
        prev = 34
        if k < 0:
            continue
        # a token key: blanks, a colon, blanks, then its value
        i = _blanks(buf, i)
        if i >= n or buf[i] != 58:
            continue  # not followed by a colon: not JSON the parser will accept
        prev = 58
        i = _blanks(buf, i + 1)
        if i >= n or buf[i] != 91:
            continue  # null or another value: the parser reads it
        if line >= count.shape[1] or count[k, line] >= 0:
            return -1  # more lines than counted, or a key given twice
        start = num_values[k]
        if k < ids.shape[0]:
            after, end = _int_array(buf, i + 1, ids[k], start, INT32_MAX)
        else:
            after, end = _int_array(buf, i + 1, hashes, start, INT64_MAX)
        if after < 0:
            return -1
        num_values[k] = end
        count[k, line] = end - start
        out[o : o + i + 1 - mark] = buf[mark : i + 1]  # up to and with the '['
        o += i + 1 - mark
        out[o] = 93
        o += 1
        i = mark = after
        prev = 93
    out[o : o + n - mark] = buf[mark:n]
    return o + n - mark


def _which_key(buf, a, b, keys, key_starts):  # pragma: no cover - compiled
    for k in range(key_starts.size - 1):
        s, e = key_starts[k], key_starts[k + 1]
        if e - s != b - a:
            continue
        same = True
        for t in range(e - s):
            if buf[a + t] != keys[s + t]:
                same = False
                break
        if same:
            return k
    return -1


def _int_array(buf, i, values, nv, limit):  # pragma: no cover - compiled
    """Parse integers and commas up to the closing bracket, from just after '['; returns
    (index after ']', values written) or (-1, nv) when it is not a plain integer array of
    magnitudes up to `limit` (the width of `values`).
    The buffer ends in a newline (the kernel checks), which stops every loop here: no
    index is compared with the buffer's size."""
    i = _blanks(buf, i)
    if buf[i] == 93:
        return i + 1, nv
    while True:
        c = buf[i]
        negative = c == 45
        if negative:
            i += 1
            c = buf[i]
        value = np.int64(c) - 48
        if value < 0 or value > 9:
            return -1, nv
        i += 1
        c = buf[i]
        if value == 0 and 48 <= c <= 57:
            return -1, nv  # a leading zero is not JSON
        digits = 1
        while 48 <= c <= 57:
            digit = np.int64(c) - 48
            # 18 digits always fit; only longer numbers need the (slow) overflow test
            if digits >= 18 and value > (INT64_MAX - digit) // 10:
                return -1, nv  # past int64
            value = value * 10 + digit
            digits += 1
            i += 1
            c = buf[i]
        if value > limit:
            return -1, nv  # past the column's width
        values[nv] = -value if negative else value
        nv += 1
        if c == 44:  # the usual case: a comma right after the number
            i += 1
            if buf[i] == 32 or buf[i] == 9 or buf[i] == 13:
                i = _blanks(buf, i)
            continue
        if c == 93:
            return i + 1, nv
        i = _blanks(buf, i)
        if buf[i] == 93:
            return i + 1, nv
        if buf[i] != 44:
            return -1, nv  # a fraction, an exponent or a stray byte
        i = _blanks(buf, i + 1)


def _blanks(buf, i):  # pragma: no cover - compiled
    n = buf.size
    while i < n and (buf[i] == 32 or buf[i] == 9 or buf[i] == 13):
        i += 1
    return i


_COMPILING = threading.Lock()
_loading = Warmup("hpa-numba")  # load_early's thread, until waited for
_WARM_BODY = b'{"prompt_token_ids": [1], "output_token_ids": [2], "block_hash_ids": [3]}\n'


def load_early() -> None:
    """Load the kernel in a thread now: a large ingest's first batch then does not wait the
    half second numba takes (importing it, then its first call) while the store opens and
    the file's first batch is read. At most once a process."""
    if not _compile.cache_info().currsize:
        _loading.start(warm)


def warm() -> None:
    """Load (or compile) the kernel: one line with every key, as a batch is scanned."""
    try:
        strip_token_arrays(_WARM_BODY, 1)
    except Exception:  # noqa: BLE001 - a batch's own call meets it again, and reports it
        pass


def _compiled():
    """The compiled kernel, or None without numba. Imported on first use: importing numba
    costs about half a second, which small ingests (and every other command) never pay.
    Parsing threads ask at once: one compiles (or loads), the others wait for it."""
    with _COMPILING:
        return _compile()


@cache
def _compile():
    global _blanks, _int_array, _which_key
    try:
        from numba import njit
    except ImportError:  # pragma: no cover - numba is a dependency; ingest still works
        return None
    _blanks = njit(cache=True, nogil=True)(_blanks)
    _int_array = njit(cache=True, nogil=True)(_int_array)
    _which_key = njit(cache=True, nogil=True)(_which_key)
    return njit(cache=True, nogil=True)(_kernel)
