"""What the earlier requests had scheduled when a request is admitted: level L2b of the loss
waterfall (`shared_scheduled_tokens`, docs/definitions.md#the-loss-waterfall), in tokens, for the
concurrent replay.

    T = max over the earlier requests r of min(common prefix of the prompt and r's sequence,
                                               the tokens r had scheduled)

(a request that finished counts its whole sequence, prompt and outputs, as a serial replay
would). Full attention hashes every block when it is scheduled, so the prompt's leading blocks
found among every attention key ever hashed (`ever`) were scheduled by somebody: j whole
blocks. The rest lies in block j, among the requests that share the first j blocks and
scheduled some of block j. They are kept under block j's parent hash id:

- `whole`: the distinct contents of blocks scheduled whole, sorted, so the longest common
  prefix with any of them is one with a neighbour of the prompt's block j;
- `moving`: the requests whose scheduled tokens ended inside the block (their frontier), with
  whatever they have scheduled since.

A block scheduled whole is kept only under a parent where hash chains branch (one with an
explicit child edge, `HashInterner.ids`): under any other parent, its one child is the
prompt's own block j, which would have been found in `ever`. With a match unit below the
block size chains branch inside blocks, so every block is kept.

    B=4: r scheduled [1 2 3 4][5 6 7 8][9 9]   prompt [1 2 3 4][5 6 7 8][9 9 9 1]
         j = 2 (both blocks in ever); block 2: r's frontier [9 9], 2 tokens -> T = 10
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from analyzer.sim.vllm.flight import Flight
from analyzer.sim.vllm.layout import CacheLayout


class ScheduledPrefixes:
    """`record` each scheduled chunk; for a request about to be admitted, `scheduled_blocks`
    (before its own blocks are hashed), then `shared`: T.
    `shared` asks the replay's `scheduled_tokens(flight)`: how many tokens of its sequence a
    request has scheduled (all of them once it finished); it is given at each call, not kept,
    so that nothing here refers back to the replay (no reference cycle: a replay's state is
    freed when it ends, not at the collector's next full pass)."""

    def __init__(
        self,
        layout: CacheLayout,
        ever: set[int],
        key: tuple[int, int],
        branches: set[int] | None,
    ) -> None:
        self.B = layout.block_size
        self.s = layout.block_size // layout.hash_block_size
        self.ever = ever
        self.key = key  # (groups, gid): hash id h has the full-attention key h x groups + gid
        self.branches = branches  # parents kept for whole blocks; None: every parent
        # parent -> (block contents sorted, each as a big-endian integer: compared by XOR)
        self.whole: dict[int, tuple[list[bytes], list[int]]] = {}
        self.moving: dict[int, list[Flight]] = {}

    def record(self, f: Flight, start_tokens: int, end_tokens: int) -> None:
        """`f` scheduled tokens [start, end) of its sequence: keep the blocks it reached."""
        B, s, source = self.B, self.s, f.req.source
        first = max(start_tokens // B, f.kept_blocks)
        last = (end_tokens - 1) // B
        if last < first:
            return
        f.kept_blocks = last + 1
        if end_tokens % B:  # the frontier: scheduled up to inside this block
            parent = source.ids[last * s - 1] if last else source.root
            self.moving.setdefault(parent, []).append(f)
            last -= 1
        if last < first:
            return
        ids = source.ids
        if first:
            parents = ids[first * s - 1 : last * s : s]
        else:
            parents = [source.root, *ids[s - 1 : last * s : s]]
        kept = parents if self.branches is None else self.branches.intersection(parents)
        size = source.item_bytes * (B // source.item_tokens)
        for parent in kept:
            k = first + parents.index(parent)
            self._keep_whole(parent, source.data[k * size : (k + 1) * size])

    def scheduled_blocks(self, f: Flight, resident_tokens: int) -> int:
        """How many leading blocks of `f`'s prompt had been scheduled (hashed) by anybody;
        asked before its admission hashes its own. `resident_tokens` (the lookup's
        attention match) were cached, so scheduled: the search starts after them."""
        req, B, s = f.req, self.B, self.s
        hashes, ever = req.hashes, self.ever
        groups, gid = self.key
        full = min(req.prompt // B, len(hashes) // s)
        j = min(resident_tokens // B, full)
        while j < full and hashes[(j + 1) * s - 1] * groups + gid in ever:
            j += 1
        return j

    def shared(self, f: Flight, j: int, scheduled_tokens: Callable[[Flight], int]) -> int:
        """T for `f`'s prompt (tokens) whose first `j` blocks had been scheduled: the best
        part of block j any earlier request had scheduled."""
        req, B = f.req, self.B
        rest = min(B, req.prompt - j * B)  # the prompt's tokens in block j
        if rest <= 0:
            return req.prompt
        source = req.source
        parent = source.ids[j * self.s - 1] if j else source.root
        item, per = source.item_bytes, source.item_tokens
        lo, mine = j * B // per * item, rest // per * item
        best = self._best_whole(parent, source.data[lo : lo + mine], mine)
        moving = self.moving.get(parent)
        if moving:
            whole_bytes = B // per * item
            kept = []
            for other in moving:
                ahead = (scheduled_tokens(other) - j * B) // per * item
                if ahead >= whole_bytes and other is not f:
                    self._settle(parent, other, lo, whole_bytes)  # moved on: a whole block
                    ahead = 0  # compared below, as whole blocks are
                else:
                    kept.append(other)
                if other is f:
                    continue
                data = other.req.source.data
                size = min(mine, ahead, len(data) - lo)
                if size > best:
                    best = max(best, _common_bytes(source.data, data, lo, size))
            if len(kept) < len(moving):
                self.moving[parent] = kept
                best = max(best, self._best_whole(parent, source.data[lo : lo + mine], mine))
        return j * B + min(best // item * per, rest)

    def _best_whole(self, parent: int, block: bytes, mine: int) -> int:
        """The most leading bytes of `block` (`mine` long) any block scheduled whole under
        `parent` agrees on."""
        whole = self.whole.get(parent)
        if not whole:
            return 0
        contents, values = whole
        at = bisect_left(contents, block)
        value = int.from_bytes(block, "big")
        best = 0
        for k in range(max(at - 1, 0), min(at + 1, len(contents))):
            size = min(mine, len(contents[k]))
            a = value >> 8 * (mine - size)
            b = values[k] >> 8 * (len(contents[k]) - size)
            best = max(best, _agreeing(a, b, size))
        return best

    def _settle(self, parent: int, other: Flight, lo: int, size: int) -> None:
        """`other` has scheduled its whole block under `parent` since its frontier was kept
        there: keep that block among the whole ones (the same bytes compare the same way) and
        stop walking it (a frontier list under a common parent grew with every request)."""
        self._keep_whole(parent, other.req.source.data[lo : lo + size])

    def _keep_whole(self, parent: int, block: bytes) -> None:
        """Keep `block`, scheduled whole under `parent`, among the sorted whole blocks."""
        contents, values = self.whole.setdefault(parent, ([], []))
        at = bisect_left(contents, block)
        if at == len(contents) or contents[at] != block:
            contents.insert(at, block)
            values.insert(at, int.from_bytes(block, "big"))


def _common_bytes(a: bytes, b: bytes, lo: int, size: int) -> int:
    """How many of the `size` bytes from a[lo] and b[lo] agree before the first that does
    not (all `size` when none differs)."""
    if size <= 0:
        return 0
    mine, theirs = a[lo : lo + size], b[lo : lo + size]
    if mine == theirs:
        return size
    return _agreeing(int.from_bytes(mine, "big"), int.from_bytes(theirs, "big"), size)


def _agreeing(a: int, b: int, size: int) -> int:
    """Leading bytes two `size`-byte big-endian integers share: the highest bit set in their
    XOR lies in the first byte that differs."""
    return size - ((a ^ b).bit_length() + 7) // 8
