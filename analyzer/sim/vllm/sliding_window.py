"""Sliding-window attention groups (vLLM `SlidingWindowManager`).

A sliding-window layer reads only the last W - 1 tokens before the next one, so:
- a hit at token t needs the cdiv(W - 1, B) blocks ending at t resident (earlier ones need not);
- blocks that fall out of the window while the request runs are freed at once;
- under sparse retention only the window tails ending at reachable boundaries are hashed.
Units: W and B in tokens; slot i covers tokens [i*B, (i+1)*B).
"""

from __future__ import annotations

from analyzer.sim.vllm.layout import CacheLayout, cdiv
from analyzer.sim.vllm.managers import Manager


class SlidingWindowManager(Manager):
    kind = "sliding_window"
    sparse = True

    def __init__(self, gid, pool, layout: CacheLayout) -> None:
        super().__init__(gid, pool, layout)
        budget = layout.max_num_batched_tokens
        if budget is not None:
            # Blocks live at once: the window plus the tokens of the steps in flight (two
            # batches: vLLM's default async scheduling), +1 for a window that does not start
            # on a block boundary (vLLM `max_admission_blocks_per_request`).
            self.admission_cap = cdiv(layout.sliding_window - 1 + 2 * budget, self.B) + 1

    @staticmethod
    def longest_hit(
        probe, hashes: list[int], max_len: int, drop: bool, layout: CacheLayout
    ) -> tuple[int, list[tuple[int, ...]]]:
        """(hit tokens, rows): the right-most run of `need` resident blocks ending <= max_len.

        Scanned right to left; rows before the run are NULL. Without such a run, a prefix
        shorter than the window may still hit: the resident run from block 0.

            W=9, B=4: need = cdiv(8, 4) = 2;  resident [x][ ][x][x][ ]  -> hit 16 (slots 2, 3)
        """
        B, H, align = layout.block_size, layout.hash_block_size, layout.alignment
        s = B // H
        need = layout.swa_blocks_for_hit + (1 if drop else 0)
        top = max_len // B
        rows: list = [None] * top
        run = 0
        matched = False
        for i in range(top - 1, -1, -1):
            row = probe(hashes[(i + 1) * s - 1])
            if row is None:
                run = 0
                continue
            if run == 0 and B != align and ((i if drop else i + 1) * B) % align:
                continue
            rows[i] = row
            run += 1
            if run >= need:
                del rows[i + run :]
                matched = True
                break
        if not matched:
            del rows[run:]
            while B != align and len(rows) * B % align:
                rows.pop()
        if drop and rows:
            rows.pop()
            while B != align and len(rows) * B % align:
                rows.pop()
        return len(rows) * B, rows

    def skipped_tokens(self, computed: int) -> int:
        return max(0, computed - self.layout.sliding_window + 1)

    def mask(self, start: int, end: int, boundaries: list[int]) -> list[bool] | None:
        """Window tails to hash among slots [start, end) (vLLM `reachable_block_mask`).

        retention None: a tail before every aligned boundary (all blocks when the window spans
        a whole segment); 0: only tails ending at `boundaries`; N: one per N tokens + those.

            B=4, need=2, retention 16 (4 slots per segment): slots 2,3 | 6,7 | ... hashed
        """
        layout = self.layout
        B, align = self.B, layout.alignment
        if align % B:
            return None
        need = layout.swa_blocks_for_hit + (1 if self.use_eagle else 0)
        shift = 1 if self.use_eagle else 0
        retention = layout.retention_interval
        segment = align if retention is None else (retention or None)
        mask = [False] * (end - start)
        if segment is not None:
            per = segment // B
            if need >= per:
                return None
            for i in range(start, end):
                if i >= shift and (i - shift) % per >= per - need:
                    mask[i - start] = True
        if retention is not None:
            for boundary in boundaries:
                stop = boundary // align * align // B + shift
                for j in range(max(start, stop - need), min(end, stop)):
                    mask[j - start] = True
        return mask
