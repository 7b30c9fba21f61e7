#!/usr/bin/env python3
"""Fleet mode of the vLLM oracle: N real vLLM 0.33.0 schedulers on ONE simulated clock, each
arrival routed by a router rule written here.

Run it with the oracle's venv (``~/.cache/hpa-oracle``, see ``../shared/oracle/README.md``)::

    PY=~/.cache/hpa-oracle/bin/python
    $PY tools/oracle/fleet_oracle.py --trace TRACE --replicas 4 --routing dynamo \\
        --block-size 16 --mamba-mode off --num-gpu-blocks 400 [any vllm_oracle.py cache flag]

What is real: every replica is a ``vllm_oracle.Oracle`` built by the shared oracle file itself
(``../shared/oracle/vllm_oracle.py``, loaded by path; ``HPA_ORACLE_SCRIPT`` or
``--oracle-script`` override it), i.e. vLLM's own ``Scheduler`` with its own ``KVCacheManager``,
``HybridKVCacheCoordinator`` and ``BlockPool``, configured exactly as ``--concurrent`` configures
its one scheduler. Each replica is driven by the loop of ``Oracle.run_concurrent`` (``schedule()``
at a step start c, the fake model output processed by ``update_from_output`` at c + step_base +
step_token x scheduled tokens), and the per-step attribution is checked against vLLM's
``PrefixCacheStats`` as there.

What is written here: the clock that interleaves the replicas and the three router rules.

Clock (the contract hpa's fleet implements). Events are taken in time order; at equal times:
every replica's step ends (replica order), then arrivals (each routed as it comes, in arrival
order = (arrival, trace index)), then step starts (replica order). An arrival at t is therefore
routed after every step end <= t and every step start < t; the request is created and
``add_request``-ed to the chosen replica's scheduler at t (it joins its waiting queue) and is
admitted at that replica's next step start >= t. A replica with no running and no waiting
request idles; a request routed to an idle replica makes it start a step at t (after every
arrival at t has been routed). Empty steps (nothing scheduled) take no time and are handled as
``run_concurrent`` handles them (retry after a preemption, abort an unschedulable head).
Router hooks: first token = when the step end that samples the request's first token is
processed; finish = when the step end that samples its last token is processed (an aborted
request also finishes, at the abort).

Routers (nothing random: where upstream breaks ties at random, ties go to the lowest index):

* ``least_loaded``: vLLM 0.33.0's DP balancer, ``vllm/v1/engine/core_client.py``
  ``DPLBAsyncMPClient.get_core_engine_for_request`` with one client (client_count 1): scan the
  replicas from a start index (0, then +1 mod n after every routed request); score =
  ``max(inflight[w], waiting[w] + running[w])``, plus ``waiting[w] * 6.0 * max(0,
  kv_usage[w] - 0.5)`` when ``waiting[w]`` > 0; the first strictly lowest score wins.
  ``waiting``/``running``/``kv_usage`` = what ``Scheduler.make_stats()`` would publish to the DP
  coordinator (``num_waiting_reqs`` = waiting + KV-holding waiting - deferred,
  ``num_running_reqs``, ``kv_cache_manager.usage``), read exact at the routing instant;
  ``inflight[w]`` (router-local): +1 at routing, -1 at the finish. The client's optimistic
  local waiting increment is overwritten by every fresh snapshot, so with exact stats it is
  never seen (see ``LeastLoaded``).
* ``dynamo``: Dynamo 1.6.1's KV router with its defaults (``lib/kv-router``: overlap credit 1,
  prefill load scale 1, temperature 0, no host/disk tier, no credit decay, no per-request
  weight, prefill load model "none"): argmin of ``max(0, (active_prefill_tokens[w] + ISL) /
  block_size - overlap_blocks[w]) + active_blocks[w] + new_blocks[w]`` (a float; no ceil).
  ``overlap_blocks[w]``: the leading full prompt blocks whose block hash is in replica w's
  ``BlockPool.cached_block_hash_to_block`` for the full-attention group (group 0) right now.
  ``active_prefill_tokens[w]`` (router-local): each request routed to w adds ``ISL -
  overlap_blocks[w] * block_size`` (its effective prefill tokens on w at routing) and takes it
  back at its first token (or its finish, if it never had one). ``active_blocks[w]``
  (router-local): the distinct full prompt block hashes of the requests routed to w and not
  finished; ``new_blocks[w]``: the request's full prompt blocks minus the length of its
  leading run already in ``active_blocks[w]``. Details and upstream files in ``Dynamo``.
* ``llm-d`` (precise prefix scorer): argmax of ``2.0 * queue + 2.0 * kv + 3.0 * prefix`` (in
  this order of addition): queue = ``(max - waiting[w]) / (max - min)`` over the replicas'
  waiting counts (1.0 for all when they are equal); kv = ``1.0 - KVCacheManager.usage`` (vLLM's
  ``1.0 - free_blocks / (num_gpu_blocks - 1)``: the null block is not usable, evictable cached
  blocks count as free); prefix = ``min(1.0, overlap_blocks[w] / full_prompt_blocks)`` with the
  same overlap as dynamo's, 0.0 when the prompt has no full block.

Output: one JSON line per request in trace order, then a summary line. Per request:
``request_id``, ``replica``, the simulated times (seconds from the earliest arrival, rounded to
1 ns) ``arrival_s``, ``first_scheduled_s``, ``first_token_s``, ``finished_s``,
``num_prompt_tokens``, ``num_output_tokens``, at the first admission ``queried``, ``hit``,
``uncached_common``, ``junction``; ``num_preemptions``, ``hit_total``; and ``view``, what the
router read for every replica at routing time (least_loaded: [waiting, running, kv_usage
rounded to 1e-6, inflight]; dynamo: [overlap_blocks, active_prefill_tokens before this
request, active_blocks + new_blocks]; llm-d:
[waiting, free_blocks, overlap_blocks]). The wall-clock timing goes to stderr, so stdout is
byte-identical from run to run.
"""

from __future__ import annotations

import argparse
import heapq
import importlib.util
import json
import logging
import os
import shutil
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_ORACLE_SCRIPT = "../shared/oracle/vllm_oracle.py"  # relative to the repository root
ROUTINGS = ("least_loaded", "dynamo", "llm-d")
END, ARRIVAL, START = 0, 1, 2  # event order at equal times


def load_oracle_module(path: str | os.PathLike):
    """The shared oracle file, imported by path (its Oracle builds one real scheduler)."""
    path = Path(path)
    if not path.is_absolute():
        path = (REPO / path).resolve()
    spec = importlib.util.spec_from_file_location("vllm_oracle", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the oracle from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["vllm_oracle"] = module
    spec.loader.exec_module(module)
    return module


def _r9(x: float | None) -> float | None:
    return None if x is None else round(x, 9)


# --------------------------------------------------------------------------------------------
# Routers (written here from the upstream code; never imported from hpa)
# --------------------------------------------------------------------------------------------


def _argmin(values: list) -> int:
    best = 0
    for i in range(1, len(values)):
        if values[i] < values[best]:
            best = i
    return best


def _argmax(values: list) -> int:
    best = 0
    for i in range(1, len(values)):
        if values[i] > values[best]:
            best = i
    return best


class Router:
    """Picks a replica for a request; sees the replicas' real schedulers and pools."""

    def __init__(self, replicas: list[Replica], block_size: int) -> None:
        self.replicas = replicas
        self.block_size = block_size

    def overlap_blocks(self, replica: Replica, hashes: list) -> int:
        """Leading full prompt blocks whose hash the replica's pool holds (full attention)."""
        from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id

        table = replica.pool.cached_block_hash_to_block
        n = 0
        for h in hashes:
            if table.get_one_block(make_block_hash_with_group_id(h, 0)) is None:
                break
            n += 1
        return n

    def route(self, rid: str, isl: int, hashes: list) -> tuple[int, list]:
        """(replica, view) for request ``rid`` with ISL ``isl`` and full-block ``hashes``."""
        raise NotImplementedError

    def on_first_token(self, replica: int, rid: str) -> None:
        pass

    def on_finish(self, replica: int, rid: str) -> None:
        pass


class LeastLoaded(Router):
    """vLLM 0.33.0 ``DPLBAsyncMPClient.get_core_engine_for_request`` (one client).

    ``vllm/v1/engine/core_client.py``: engines are scanned from ``eng_start_index``
    (``len(core_engines) * client_index // client_count`` = 0, then +1 mod n after every
    routed request); per engine ``score = max(client_count * inflight, waiting + running)``
    plus ``waiting * 6.0 * max(0, kv_cache_usage - 0.5)`` when ``waiting`` > 0; the first
    engine with a strictly lower score than every engine scanned before it wins.
    ``engine_inflight`` is +1 at dispatch and -1 in ``process_engine_outputs`` when the
    request id is in ``outputs.finished_requests``. ``[waiting, running, kv_cache_usage]`` is
    the DP coordinator's per-engine snapshot of ``SchedulerStats`` (``num_waiting_reqs``,
    ``num_running_reqs``, ``kv_cache_usage``); here it is read exact at the routing instant.
    The client's optimistic ``current_counts[eng_index][0] += client_count`` only patches its
    copy of a stale snapshot until the coordinator's next one replaces it; with exact counts
    every routing reads a fresh snapshot that already holds every routed request (each is
    ``add_request``-ed at once), so the increment is never visible and is not modelled.
    """

    def __init__(self, replicas, block_size):
        super().__init__(replicas, block_size)
        self.client_count = 1
        self.start = 0  # eng_start_index for client_index 0
        self.inflight = [0] * len(replicas)

    @staticmethod
    def snapshot(r: Replica) -> tuple[int, int, float]:
        """``Scheduler.make_stats()``'s waiting, running and kv usage, without draining it."""
        s = r.scheduler
        running, waiting = s.get_request_counts()
        return waiting - len(s.deferred_waiting), running, r.kv_cache_manager.usage

    def route(self, rid, isl, hashes):
        n = len(self.replicas)
        counts = [self.snapshot(r) for r in self.replicas]
        min_score, pick = float(sys.maxsize), 0
        for i in range(n):
            idx = (self.start + i) % n
            waiting, running, usage = counts[idx]
            score = float(max(self.client_count * self.inflight[idx], waiting + running))
            if waiting:
                score += waiting * 6.0 * max(0.0, usage - 0.5)
            if score < min_score:
                min_score, pick = score, idx
        self.start = (self.start + 1) % n
        view = [[w, r, round(u, 6), self.inflight[i]] for i, (w, r, u) in enumerate(counts)]
        self.inflight[pick] += 1
        return pick, view

    def on_finish(self, replica, rid):
        self.inflight[replica] -= 1


class Dynamo(Router):
    """Dynamo 1.6.1 KV router, default config (``lib/kv-router``).

    Per worker w (``scheduling/selector/mod.rs`` ``WorkerSelectionInput::row`` and
    ``selector/default.rs`` ``DefaultWorkerScorer::worker_logit``; overlap credit 1, prefill
    load scale 1, no host/disk tiers, credit decay 0, active-request weight 0)::

        cached   = overlap_blocks[w] * block_size                  (overlap.rs)
        raw      = (active_prefill[w] + (ISL - min(cached, ISL)) + cached) / block_size
        logit[w] = max(0, raw - overlap_blocks[w]) + active_blocks[w] + new_blocks[w]

    ``active_prefill[w]``: the sum over w's requests without a first token of what each
    added when it was booked, ``ISL - min(cached[w], ISL)`` (``prefill_load_hint_for`` /
    ``effective_prefill_tokens``; nothing when that is 0), removed at its first token
    (``mark_prefill_completed``) or at its finish (``free``); with
    ``router_prefill_load_model`` "none" it does not decay (``prefill_tracker.rs``).
    ``active_blocks[w]``: w's distinct active prompt sequence hashes (``block_tracker.rs``,
    prompt blocks only: ``router_track_output_blocks`` is off); ``new_blocks[w]``: the
    request's full prompt blocks minus the depth of its leading run already active on w
    (``prompt_registry.rs`` ``additional_active_blocks``). Block hashes are of full blocks
    only (``compute_block_hash_for_seq`` uses exact chunks). Lowest logit wins; upstream
    breaks ties at random (``fastrand``), here to the lowest index.

    Read at the ai-dynamo/dynamo commits the source index holds (default.rs / mod.rs
    07a6c9ce, prefill_tracker.rs 0b6b9200, block_tracker.rs 057096c3, prompt_registry.rs
    312d3427, overlap.rs 13a4eeab) and checked against the symbols of the ai-dynamo-runtime
    1.6.1 wheel: 1.6.1 has ``PromptRegistry::apply_membership_delta_and_load`` and
    ``project_worker_loads_into`` but not the later ``staged_decode_blocks`` projection of
    prompt_registry.rs 312d3427, so the decode term is 1.6.1's ``active_blocks +
    additional_active_blocks``.
    """

    def __init__(self, replicas, block_size):
        super().__init__(replicas, block_size)
        self.active_prefill = [0] * len(replicas)
        self.active_hashes = [Counter() for _ in replicas]
        self.prefill: dict[str, int] = {}  # rid -> tokens it added, until its first token
        self.blocks: dict[str, list] = {}  # rid -> its prompt block hashes, until it finishes

    def route(self, rid, isl, hashes):
        bs = self.block_size
        view, logits, overlaps = [], [], []
        for w, r in enumerate(self.replicas):
            overlap = self.overlap_blocks(r, hashes)
            cached = overlap * bs
            active = self.active_hashes[w]
            depth = 0
            for h in hashes:
                if h not in active:
                    break
                depth += 1
            decode = len(active) + len(hashes) - depth
            raw = (self.active_prefill[w] + (isl - min(cached, isl)) + cached) / bs
            logits.append(max(0.0, raw - overlap) + decode)
            overlaps.append(overlap)
            view.append([overlap, self.active_prefill[w], decode])
        w = _argmin(logits)
        added = isl - min(overlaps[w] * bs, isl)
        self.active_prefill[w] += added
        if added > 0:
            self.prefill[rid] = added
        self.active_hashes[w].update(hashes)
        self.blocks[rid] = hashes
        return w, view

    def on_first_token(self, replica, rid):
        self.active_prefill[replica] -= self.prefill.pop(rid, 0)

    def on_finish(self, replica, rid):
        self.on_first_token(replica, rid)  # free() also ends a prefill still tracked
        active = self.active_hashes[replica]
        for h in self.blocks.pop(rid):
            active[h] -= 1
            if active[h] == 0:
                del active[h]


class LlmdPrecise(Router):
    """llm-d default profile: 2 x queue + 2 x kv-cache-utilization + 3 x prefix (precise)."""

    def route(self, rid, isl, hashes):
        full = len(hashes)
        waiting, view = [], []
        for r in self.replicas:
            w = r.scheduler.get_request_counts()[1]
            overlap = self.overlap_blocks(r, hashes) if full else 0
            waiting.append(w)
            view.append([w, r.pool.get_num_free_blocks(), overlap])
        lo, hi = min(waiting), max(waiting)
        scores = []
        for (w, _free, overlap), r in zip(view, self.replicas, strict=True):
            queue = 1.0 if hi == lo else (hi - w) / (hi - lo)
            kv = 1.0 - r.kv_cache_manager.usage
            prefix = min(1.0, overlap / full) if full else 0.0
            scores.append(2.0 * queue + 2.0 * kv + 3.0 * prefix)
        return _argmax(scores), view


ROUTERS = {"least_loaded": LeastLoaded, "dynamo": Dynamo, "llm-d": LlmdPrecise}


# --------------------------------------------------------------------------------------------
# One replica: the run_concurrent loop, split at the step start and the step end
# --------------------------------------------------------------------------------------------

STAT_KEYS = (
    "requests",
    "queries",
    "hits",
    "preempted_requests",
    "preempted_queries",
    "preempted_hits",
)


class Replica:
    def __init__(self, index: int, oracle) -> None:
        self.index = index
        self.oracle = oracle
        self.scheduler = oracle.scheduler
        self.kv_cache_manager = oracle.kv_cache_manager
        self.pool = self.kv_cache_manager.block_pool
        self.pending: str | None = None  # "start" or "end" queued, None = idle
        self.step: tuple | None = None  # (so, req_ids, sampled, want) of the step in flight
        self.tot = dict.fromkeys(STAT_KEYS, 0)
        self.stats = {
            "requests_routed": 0,
            "steps": 0,
            "empty_steps": 0,
            "scheduled_tokens": 0,
            "preemptions": 0,
            "errors": 0,
            "evicted_blocks": 0,
            "running_max": 0,
            "waiting_max": 0,
            "kv_usage_max": 0.0,
            "busy_s": 0.0,
        }
        orig = self.pool._maybe_evict_cached_block

        def _counting_evict(block, _orig=orig):
            evicted = _orig(block)
            if evicted:
                self.stats["evicted_blocks"] += 1
            return evicted

        self.pool._maybe_evict_cached_block = _counting_evict

    def absorb(self, eco_map) -> dict:
        got = dict.fromkeys(STAT_KEYS, 0)
        for eco in eco_map.values():
            st = eco.scheduler_stats
            if st is None or st.prefix_cache_stats is None:
                continue
            for k in got:
                got[k] += getattr(st.prefix_cache_stats, k)
        for k in got:
            self.tot[k] += got[k]
        return got


class Fleet:
    def __init__(self, mod, args, recs: list[dict], arrivals: list[float]) -> None:
        from vllm.v1.outputs import ModelRunnerOutput

        self.mod, self.args, self.recs, self.arrivals = mod, args, recs, arrivals
        longest = max(
            (len(r["prompt_token_ids"]) + len(r.get("output_token_ids") or []) for r in recs),
            default=1,
        )
        max_model_len = args.max_model_len or max(
            longest + 1, args.block_size, args.mamba_block_size or 0
        )
        self.replicas = [Replica(i, mod.Oracle(args, max_model_len)) for i in range(args.replicas)]
        first = self.replicas[0].oracle
        if first.block_hasher is None:
            raise SystemExit("fleet mode needs prefix caching (not --mamba-mode none)")
        if first.hash_block_size != args.block_size:
            raise SystemExit("fleet mode needs hash block size == block size (no unit)")
        self.block_hasher = first.block_hasher  # the same function in every replica
        self.router = ROUTERS[args.routing](self.replicas, args.block_size)
        self.empty_mro = ModelRunnerOutput(req_ids=[], req_id_to_index={}, sampled_token_ids=[])
        self.step_base_s = args.step_base_ms / 1000
        self.step_token_s = args.step_token_us / 1e6
        self.states: list[dict] = []
        self.by_id: dict[str, dict] = {}
        for i, rec in enumerate(recs):
            rid = str(rec["request_id"])
            if rid in self.by_id:
                raise SystemExit(f"duplicate request_id {rid!r}")
            st = {
                "rid": rid,
                "rec": rec,
                "req": None,
                "arrival": arrivals[i],
                "outputs": [int(t) for t in (rec.get("output_token_ids") or [])],
                "replica": None,
                "view": None,
                "hashes": [],
                "first_scheduled_s": None,
                "first_token_s": None,
                "finished_s": None,
                "queried": 0,
                "hit": 0,
                "junction": 0,
                "local_cached": None,
                "admissions": 0,
                "hit_total": 0,
                "queried_total": 0,
                "preempted_seen": 0,
                "error": None,
            }
            self.states.append(st)
            self.by_id[rid] = st
        self.events: list[tuple] = []
        self.clock = 0.0

    # -- events ---------------------------------------------------------------------------
    def push(self, t: float, kind: int, key: int) -> None:
        heapq.heappush(self.events, (t, kind, key))

    def run(self) -> None:
        n = len(self.recs)
        order = sorted(range(n), key=lambda i: (self.arrivals[i], i))
        for k, i in enumerate(order):
            self.push(self.arrivals[i], ARRIVAL, k)
        while self.events:
            t, kind, key = heapq.heappop(self.events)
            self.clock = t
            if kind == END:
                self.step_end(self.replicas[key], t)
            elif kind == ARRIVAL:
                self.arrive(self.states[order[key]], t)
            else:
                self.step_start(self.replicas[key], t)
        for r in self.replicas:
            st_ = r.scheduler.make_stats()
            if st_ is not None and st_.prefix_cache_stats is not None:
                pcs = st_.prefix_cache_stats
                if pcs.requests or pcs.preempted_requests:
                    raise RuntimeError(f"replica {r.index}: prefix-cache stats left unreported")
            n_run, n_wait = r.scheduler.get_request_counts()
            if n_run or n_wait:
                raise RuntimeError(f"replica {r.index}: {n_run} running, {n_wait} waiting at end")

    def arrive(self, st: dict, t: float) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        prompt = [int(x) for x in st["rec"]["prompt_token_ids"]]
        req = Request(
            request_id=st["rid"],
            prompt_token_ids=prompt,
            sampling_params=SamplingParams(max_tokens=max(1, len(st["outputs"])), ignore_eos=True),
            pooling_params=None,
            arrival_time=st["arrival"],
            block_hasher=self.block_hasher,
        )
        hashes = list(req.block_hashes[: len(prompt) // self.args.block_size])
        w, view = self.router.route(st["rid"], len(prompt), hashes)
        st.update(req=req, replica=w, view=view, hashes=hashes)
        r = self.replicas[w]
        r.stats["requests_routed"] += 1
        r.scheduler.add_request(req)
        if r.pending is None:  # idle: start a step at t, after every arrival at t
            r.pending = "start"
            self.push(t, START, w)

    # -- one replica's step ---------------------------------------------------------------
    def step_start(self, r: Replica, clock: float) -> None:
        from vllm.v1.request import RequestStatus

        s = r.scheduler
        while True:
            n_run, n_wait = s.get_request_counts()
            if n_run + n_wait == 0:
                r.pending = None  # idle until a request is routed here
                return
            so = s.schedule()
            total = so.total_num_scheduled_tokens
            for rid in so.preempted_req_ids:
                self.by_id[rid]["preempted_seen"] += 1
            r.stats["preemptions"] += len(so.preempted_req_ids)
            if total:
                break
            r.stats["empty_steps"] += 1
            got = r.absorb(s.update_from_output(so, self.empty_mro))
            if any(got.values()):
                raise RuntimeError(f"prefix-cache stats in an empty step: {got}")
            if so.preempted_req_ids:
                continue  # the waiting queue was not scanned; no time passes
            n_run, n_wait = s.get_request_counts()
            if n_run == 0 and n_wait > 0:
                queue = s.kv_holding_waiting if s.kv_holding_waiting else s.waiting
                head = queue.peek_request()
                st = self.by_id[head.request_id]
                s.finish_requests(head.request_id, RequestStatus.FINISHED_ABORTED)
                st["error"] = "not schedulable (KV cache too small)"
                st["finished_s"] = clock
                r.stats["errors"] += 1
                self.router.on_finish(r.index, st["rid"])
                continue
            raise RuntimeError(
                f"replica {r.index} stalled at t={clock}: nothing scheduled with "
                f"{n_run} running and {n_wait} waiting"
            )

        n_run, n_wait = s.get_request_counts()
        r.stats["running_max"] = max(r.stats["running_max"], n_run)
        r.stats["waiting_max"] = max(r.stats["waiting_max"], n_wait)
        r.stats["kv_usage_max"] = max(r.stats["kv_usage_max"], r.kv_cache_manager.usage)
        admitted = {d.req_id for d in so.scheduled_new_reqs}
        admitted.update(so.scheduled_cached_reqs.resumed_req_ids)
        want = dict.fromkeys(STAT_KEYS, 0)
        nst = so.num_scheduled_tokens
        req_ids = list(nst)  # scheduling order
        sampled: list[list[int]] = []
        for rid in req_ids:
            st = self.by_id[rid]
            req = st["req"]
            k = nst[rid]
            if rid in admitted:
                hit_now = req.num_computed_tokens - k
                if st["admissions"] == 0:
                    if req.num_preemptions != 0:
                        raise RuntimeError(f"{rid}: first admission after preemption?")
                    ps = req.prefill_stats
                    local = ps.num_local_cached_tokens if ps is not None else None
                    if local != hit_now:
                        raise RuntimeError(
                            f"{rid}: prefill_stats says {local} local cached tokens, "
                            f"Request {hit_now}"
                        )
                    st["first_scheduled_s"] = clock
                    st["hit"] = hit_now
                    st["queried"] = req.num_tokens
                    st["local_cached"] = local
                    st["junction"] = req.shared_prefix_boundary
                    want["requests"] += 1
                    want["queries"] += req.num_tokens
                    want["hits"] += hit_now
                else:
                    want["preempted_requests"] += 1
                    want["preempted_queries"] += req.num_tokens
                    want["preempted_hits"] += hit_now
                st["admissions"] += 1
                st["hit_total"] += hit_now
                st["queried_total"] += req.num_tokens
            if req.num_computed_tokens >= req.num_tokens:  # sampling step
                j = req.num_output_tokens
                outs = st["outputs"]
                sampled.append([outs[j] if j < len(outs) else self.args.dummy_token])
            else:
                sampled.append([])
        step_s = self.step_base_s + self.step_token_s * total
        r.stats["steps"] += 1
        r.stats["scheduled_tokens"] += total
        r.stats["busy_s"] += step_s
        r.step = (so, req_ids, sampled, want)
        r.pending = "end"
        self.push(clock + step_s, END, r.index)

    def step_end(self, r: Replica, clock: float) -> None:
        from vllm.v1.outputs import ModelRunnerOutput

        so, req_ids, sampled, want = r.step
        r.step = None
        mro = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=sampled,
        )
        got = r.absorb(r.scheduler.update_from_output(so, mro))
        if got != want:
            raise RuntimeError(f"replica {r.index}: PrefixCacheStats {got} != {want}")
        for rid in req_ids:
            st = self.by_id[rid]
            req = st["req"]
            if st["first_token_s"] is None and req.num_output_tokens > 0:
                st["first_token_s"] = clock
                self.router.on_first_token(r.index, rid)
            if st["finished_s"] is None and req.is_finished():
                st["finished_s"] = clock
                self.router.on_finish(r.index, rid)
        r.pending = "start"
        self.push(clock, START, r.index)

    # -- results --------------------------------------------------------------------------
    def results(self) -> tuple[list[dict], dict]:
        rows = []
        for st in self.states:
            req = st["req"]
            junction = st["junction"]
            uncached = (junction - (st["local_cached"] or 0)) if junction else 0
            if req.num_preemptions != st["preempted_seen"]:
                raise RuntimeError(f"{st['rid']}: num_preemptions mismatch")
            row = {
                "request_id": st["rid"],
                "replica": st["replica"],
                "arrival_s": _r9(st["arrival"]),
                "first_scheduled_s": _r9(st["first_scheduled_s"]),
                "first_token_s": _r9(st["first_token_s"]),
                "finished_s": _r9(st["finished_s"]),
                "num_prompt_tokens": len(st["rec"]["prompt_token_ids"]),
                "num_output_tokens": req.num_output_tokens,
                "queried": st["queried"],
                "hit": st["hit"],
                "uncached_common": uncached,
                "junction": junction,
                "num_preemptions": req.num_preemptions,
                "hit_total": st["hit_total"],
                "view": st["view"],
            }
            if st["error"]:
                row["error"] = st["error"]
            rows.append(row)
        per_replica = []
        for r in self.replicas:
            stats = dict(r.stats)
            stats["kv_usage_max"] = round(stats["kv_usage_max"], 6)
            stats["busy_s"] = round(stats["busy_s"], 9)
            per_replica.append(
                {
                    **stats,
                    "hits": r.tot["hits"],
                    "queries": r.tot["queries"],
                    "preempted_hits": r.tot["preempted_hits"],
                    "free_blocks_end": r.pool.get_num_free_blocks(),
                }
            )
        hits = sum(r.tot["hits"] for r in self.replicas)
        queries = sum(r.tot["queries"] for r in self.replicas)
        summary = {
            "summary": True,
            "mode": "fleet",
            "routing": self.args.routing,
            "replicas": self.args.replicas,
            "requests": len(rows),
            "queries": queries,
            "hits": hits,
            "hit_rate": round(hits / queries, 6) if queries else 0.0,
            "preemptions": sum(r.stats["preemptions"] for r in self.replicas),
            "evicted_blocks": sum(r.stats["evicted_blocks"] for r in self.replicas),
            "errors": sum(r.stats["errors"] for r in self.replicas),
            "makespan_s": _r9(max((x["finished_s"] or 0.0 for x in rows), default=0.0)),
            "per_replica": per_replica,
        }
        return rows, summary


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def parse(argv: list[str] | None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Every other flag is vllm_oracle.py's (cache and --concurrent time model).",
    )
    ap.add_argument("--replicas", type=int, required=True)
    ap.add_argument("--routing", choices=ROUTINGS, required=True)
    ap.add_argument(
        "--oracle-script",
        default=os.environ.get("HPA_ORACLE_SCRIPT", DEFAULT_ORACLE_SCRIPT),
        help="the shared vllm_oracle.py (relative to the repository root)",
    )
    ours, rest = ap.parse_known_args(argv)
    if ours.replicas < 1:
        ap.error("--replicas must be >= 1")
    mod = load_oracle_module(ours.oracle_script)
    args = mod.build_parser().parse_args([*rest, "--concurrent"])
    if not args.trace:
        ap.error("--trace is required")
    if args.block_size is None:
        ap.error("--block-size is required")
    if args.prefix_match_unit is not None or args.per_group or args.eagle:
        ap.error("fleet mode supports neither --prefix-match-unit, --per-group nor --eagle")
    # The --concurrent defaults of vllm_oracle.main.
    if args.max_num_batched_tokens is None:
        args.max_num_batched_tokens = 8192
    if args.max_num_seqs is None:
        args.max_num_seqs = 256
    args.replicas, args.routing = ours.replicas, ours.routing
    return mod, args


def main(argv: list[str] | None = None) -> int:
    mod, args = parse(argv)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    warnings.filterwarnings("ignore")
    logging.getLogger("torch").setLevel(logging.ERROR)
    recs = mod.load_trace(args.trace)
    arrivals = mod.concurrent_arrivals(recs, args.time_scale)
    t0 = time.perf_counter()
    fleet = Fleet(mod, args, recs, arrivals)
    t1 = time.perf_counter()
    config = fleet.replicas[0].oracle.describe()
    sc = fleet.replicas[0].oracle.vllm_config.scheduler_config
    config.update(
        {
            "mode": "fleet",
            "replicas": args.replicas,
            "routing": args.routing,
            "max_num_seqs": sc.max_num_seqs,
            "max_num_batched_tokens": sc.max_num_batched_tokens,
            "time_scale": args.time_scale,
            "step_base_ms": args.step_base_ms,
            "step_token_us": args.step_token_us,
        }
    )
    print(json.dumps({"config": config, "setup_seconds": round(t1 - t0, 3)}), file=sys.stderr)
    fleet.run()
    t2 = time.perf_counter()
    rows, summary = fleet.results()
    out = sys.stdout
    for row in rows:
        out.write(json.dumps(row) + "\n")
    out.write(json.dumps(summary) + "\n")
    out.flush()
    print(
        json.dumps(
            {
                "timing": True,
                "requests": len(rows),
                "replay_seconds": round(t2 - t1, 3),
                "setup_seconds": round(t1 - t0, 3),
            }
        ),
        file=sys.stderr,
    )
    for r in fleet.replicas:
        shutil.rmtree(r.oracle._tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
