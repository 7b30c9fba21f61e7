"""The serial replay with a host KV tier (vLLM 0.33's OffloadingConnector; `offload.py`): each
request after the previous one finished and every store it made has landed (what
`tools/oracle/vllm_offload_oracle.py` drives), step by step:

    lookup the GPU  ->  the host tier beyond it (whole chunks)
      host hit: admission step (blocks allocated, the load issued, nothing computed: the
                request waits) -> the load is in: its blocks join the GPU prefix cache ->
                the rest of the prompt from there
      otherwise: the admission as without a tier
    every step offers what it computed to the tier (write-through); the step after the
    last one offers the rest and commits the request's recency; the stores land.

A step's stores are readable once the next step has run. The decode-events shortcut refuses
a host tier (`gates.DECODE_EVENTS`): with decode tokens offered every decode step runs; under
`offload_prompt_only` this replay skips the quiet ones as without a tier (see `__init__`).
"""

from __future__ import annotations

from dataclasses import replace

from analyzer.config.policy import Policy
from analyzer.sim.records import SimRequest, SimResult
from analyzer.sim.vllm.gates import events
from analyzer.sim.vllm.managers import ReqState
from analyzer.sim.vllm.offload import Connector, Offload
from analyzer.sim.vllm.reference import NOT_SCHEDULABLE, VllmReplay
from analyzer.sim.vllm.scheduler import chunk_tokens


class HostTierReplay(VllmReplay):
    """`VllmReplay` with the host tier: one cache, requests one after another."""

    every_step = False  # tests: visit every decode step even where the tier allows skipping

    def __init__(self, policy: Policy, *, num_groups: dict[str, int] | None = None) -> None:
        super().__init__(policy, num_groups=num_groups)
        self.conn = Connector(self.layout, self.coord, self.layout.host_tier)
        if self.layout.host_tier.prompt_only and not self.every_step:
            # Serially no other request reads the tier while one decodes, and a decode step
            # offers nothing under prompt-only (its tokens lie past the prompt): from the
            # second decode step on, the tier is as it was, so an offer retried there gives
            # what it gives at the next step simulated. The GPU side's own events suffice.
            self._events = events(replace(self.layout, host_tier=None))
        self._off: Offload | None = None
        self._boundaries: list[int] = []

    def replay_one(self, sim: SimRequest) -> SimResult:
        looked = self._look_up(sim)
        if isinstance(looked, SimResult):
            return looked
        req, hit, found = looked.req, looked.hit, looked.found
        off = self._off = Offload(len(self.coord.managers))
        self._boundaries = looked.boundaries
        ext = self.conn.lookup(req, hit) or 0  # nothing is in flight between requests
        self.conn.explain(req, off, hit, ext)
        chunks: list[int] = []
        if ext:
            error = self._load(req, off, hit, found, ext, chunks)
        else:
            error = self._admit(req, hit, found, looked.boundaries, chunks)
        if error is None:
            error = self._prefill_and_decode(req, sim.num_output_tokens, looked.boundaries, chunks)
        self._finish(req, off)
        self.coord.release_skipped(req)
        self.coord.free()
        return self._result(
            sim,
            looked,
            chunks,
            error,
            host_hit_tokens=off.host_hit,
            host_wait_steps=off.wait_steps,
            host_wait_s=self.conn.spec.load_s(off.loaded_keys) if off.host_hit else None,
            host_evicted_tokens=off.evicted,
            **off.never_stored_figures(),
        )

    def _load(
        self, req: ReqState, off: Offload, hit: int, found: list, ext: int, chunks: list[int]
    ) -> str | None:
        """A host hit: the admission step allocates and issues the load (the request computes
        nothing), its outputs bring the load in; the next step caches the loaded blocks and
        schedules the rest as a waiting request whose tokens are computed."""
        coord, conn = self.coord, self.conn
        if not coord.admit_loading(req, hit, ext, coord.hit_blocks(found)):
            return NOT_SCHEDULABLE.format(self.layout.num_blocks)
        keys = conn.load(req, off, hit, ext)
        off.host_hit, off.wait_steps = ext, 1
        conn.end_step([])
        conn.loaded(keys)
        total = hit + ext
        coord.cache(req, total, self._boundaries)
        req.computed = min(total, req.num_tokens - 1)
        n = chunk_tokens(self.layout, req, req.computed, req.num_tokens - req.computed)
        empty: list[list[int]] = [[] for _ in coord.managers]
        if n == 0 or not coord.step(req, n, 0, empty, self._boundaries):
            return NOT_SCHEDULABLE.format(self.layout.num_blocks)
        chunks.append(n)
        self._stepped(req, req.computed + n)
        req.computed += n
        return None

    def _stepped(self, req: ReqState, horizon: int) -> None:
        """The step's offers: the Mamba states it hashed, then its full chunks; the stores
        of the step before land with its outputs."""
        conn, off = self.conn, self._off
        jobs: list[list[int]] = []
        conn.take_handoffs(off)
        conn.offer_states(req, off, jobs)
        conn.offer_chunks(req, off, horizon, self._boundaries, jobs)
        conn.end_step(jobs)

    def _finish(self, req: ReqState, off: Offload) -> None:
        """The step after the request's last: its last offer (vLLM offers a finished request
        up to max(prompt, sequence - 1)), its recency committed; then every store lands."""
        conn = self.conn
        jobs: list[list[int]] = []
        conn.take_handoffs(off)
        horizon = max(req.prompt, req.num_tokens - 1) if req.computed else 0
        conn.offer_chunks(req, off, horizon, self._boundaries, jobs)
        conn.tier.finish(off.access)
        conn.end_step(jobs)
        conn.drain()
