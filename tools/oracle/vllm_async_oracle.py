#!/usr/bin/env python3
"""vLLM 0.33's concurrent oracle as ``vllm serve`` runs by default: the ``AsyncScheduler``
with two batches in flight.

    <oracle python> tools/oracle/vllm_async_oracle.py --async-scheduling --concurrent \\
        --trace T.jsonl --block-size 544 ...

Every flag of the oracle (``../shared/oracle/vllm_oracle.py``, or ``$HPA_ORACLE_SCRIPT``) is
accepted; without ``--async-scheduling`` this is that oracle, unchanged. With it (and
``--concurrent``) the one scheduler is vLLM's own ``AsyncScheduler`` and the loop is the engine
core's ``step_with_batch_queue`` with a queue of two (``VllmConfig.max_concurrent_batches``
with async scheduling on one GPU), on the simulated clock:

    loop: add the requests that have arrived (arrival <= clock)
          the scheduler has requests: schedule() one batch; it runs on the GPU once the
              batches before it are done (start = max(clock, GPU free), for step_base_ms +
              step_token_us x tokens; a batch of no tokens takes no time); queue it; with
              fewer than two queued (and tokens scheduled or requests left) loop at once
          nothing queued and no requests: jump to the next arrival (or stop)
          wait for the oldest queued batch (clock = its end) and update_from_output() it

So a batch is scheduled while the one before it runs: its running requests carry an output
placeholder for the token the GPU is still sampling, the tokens those outputs complete are
hashed one batch later, a request that finishes frees its blocks after the next batch was
scheduled, and an arrival during batch k is first scheduled in batch k + 2.

Output: the fields and summary of the oracle's ``--concurrent`` mode (its README, "Concurrent
mode"), read back from vLLM's own objects the same way; the prefix-cache stats are checked
against the per-request attribution at every update (they cover every batch scheduled since
the last one).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import time
import warnings
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = os.environ.get("HPA_ORACLE_SCRIPT") or str(REPO / "../shared/oracle/vllm_oracle.py")


def _load_oracle():
    spec = importlib.util.spec_from_file_location("vllm_oracle", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


base = _load_oracle()

_ZERO = ("requests", "queries", "hits", "preempted_requests", "preempted_queries", "preempted_hits")


class AsyncOracle(base.Oracle):
    """The oracle's scheduler replaced by vLLM's `AsyncScheduler` (same configs)."""

    def __init__(self, args, max_model_len: int) -> None:
        super().__init__(args, max_model_len)
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.structured_output import StructuredOutputManager

        config = self.vllm_config
        config.scheduler_config.async_scheduling = True
        if config.max_concurrent_batches != 2:
            raise SystemExit(f"max_concurrent_batches {config.max_concurrent_batches}, not 2")
        self.scheduler = AsyncScheduler(
            vllm_config=config,
            kv_cache_config=self.kv_cache_config,
            structured_output_manager=StructuredOutputManager(config),
            block_size=self.scheduler_block_size,
            hash_block_size=self.hash_block_size,
            log_stats=True,
        )
        self.kv_cache_manager = self.scheduler.kv_cache_manager

    def describe(self) -> dict:
        out = super().describe()
        out["scheduler"] = type(self.scheduler).__name__
        out["max_concurrent_batches"] = self.vllm_config.max_concurrent_batches
        return out

    def run_async(self, recs: list[dict], arrivals: list[float]) -> tuple[list[dict], dict]:
        """`run_concurrent` of the oracle with the engine core's batch queue (see above)."""
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request, RequestStatus

        s = self.scheduler
        a = self.args
        n = len(recs)
        order = sorted(range(n), key=lambda i: (arrivals[i], i))
        step_base_s = a.step_base_ms / 1000
        step_token_s = a.step_token_us / 1e6
        depth = self.vllm_config.max_concurrent_batches

        states: list[dict] = []
        by_id: dict[str, dict] = {}
        for i, rec in enumerate(recs):
            rid = str(rec["request_id"])
            if rid in by_id:
                raise SystemExit(f"duplicate request_id {rid!r}: needs unique request ids")
            st = {
                "rid": rid,
                "rec": rec,
                "req": None,
                "arrival": arrivals[i],
                "outputs": [int(t) for t in (rec.get("output_token_ids") or [])],
                "first_step": None,
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
                "chunks": [],
                "error": None,
            }
            states.append(st)
            by_id[rid] = st

        pool = self.kv_cache_manager.block_pool
        evictions = [0]
        orig_evict = pool._maybe_evict_cached_block

        def _counting_evict(block, _orig=orig_evict):
            evicted = _orig(block)
            if evicted:
                evictions[0] += 1
            return evicted

        pool._maybe_evict_cached_block = _counting_evict

        def add(st: dict) -> None:
            prompt = [int(t) for t in st["rec"]["prompt_token_ids"]]
            max_tokens = max(1, len(st["outputs"]))
            req = Request(
                request_id=st["rid"],
                prompt_token_ids=prompt,
                sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                pooling_params=None,
                arrival_time=st["arrival"],
                block_hasher=self.block_hasher,
            )
            st["req"] = req
            s.add_request(req)

        tot = dict.fromkeys(_ZERO, 0)
        want = dict.fromkeys(_ZERO, 0)  # attributed since the stats were last reported

        def absorb(eco_map) -> None:
            got = dict.fromkeys(_ZERO, 0)
            for eco in eco_map.values():
                st_ = eco.scheduler_stats
                if st_ is None or st_.prefix_cache_stats is None:
                    continue
                for k in got:
                    got[k] += getattr(st_.prefix_cache_stats, k)
            if any(got.values()):
                if got != want:
                    raise RuntimeError(f"PrefixCacheStats {got} != attribution {want}")
                for k in got:
                    tot[k] += got[k]
                    want[k] = 0

        clock = gpu_free = 0.0
        nxt = 0
        steps = empty_steps = sched_tokens = preemptions = errors = 0
        run_time = infl_time = 0.0
        run_max = wait_max = infl_max = 0
        usage_max = 0.0
        queue: deque = deque()  # (scheduler output, end time, executed, sampling req ids)

        while True:
            while nxt < n and arrivals[order[nxt]] <= clock:
                add(states[order[nxt]])
                nxt += 1
            if s.has_requests():
                so = s.schedule()
                nst = so.num_scheduled_tokens
                total = so.total_num_scheduled_tokens
                for rid in so.preempted_req_ids:
                    by_id[rid]["preempted_seen"] += 1
                preemptions += len(so.preempted_req_ids)
                executed = total > 0
                sampling: set[str] = set()
                if executed:
                    n_run, n_wait = s.get_request_counts()
                    run_max, wait_max = max(run_max, n_run), max(wait_max, n_wait)
                    infl_max = max(infl_max, n_run + n_wait)
                    usage_max = max(usage_max, self.kv_cache_manager.usage)
                    admitted = {d.req_id for d in so.scheduled_new_reqs}
                    admitted.update(so.scheduled_cached_reqs.resumed_req_ids)
                    for rid in nst:
                        st = by_id[rid]
                        req = st["req"]
                        k = nst[rid]
                        st["chunks"].append(k)
                        if rid in admitted:
                            self._admitted(st, req, k, steps, clock, want)
                        if not req.is_prefill_chunk:
                            sampling.add(rid)
                    step_s = step_base_s + step_token_s * total
                    start = max(clock, gpu_free)
                    end = gpu_free = start + step_s
                    run_time += n_run * step_s
                    infl_time += (n_run + n_wait) * step_s
                    steps += 1
                    sched_tokens += total
                else:
                    empty_steps += 1
                    end = clock
                queue.appendleft((so, end, executed, sampling))
                busy = any(item[2] for item in queue)
                if not executed and not busy and not so.preempted_req_ids:
                    # Nothing runs or will: the loop would spin. The head of the queue never
                    # fits: abort it (the oracle's rule); anything else is a stall.
                    while queue:
                        self._update(queue.pop(), clock, by_id, absorb, a)
                    n_run, n_wait = s.get_request_counts()
                    if n_run == 0 and n_wait > 0:
                        wq = s.kv_holding_waiting if s.kv_holding_waiting else s.waiting
                        head = wq.peek_request()
                        st = by_id[head.request_id]
                        s.finish_requests(head.request_id, RequestStatus.FINISHED_ABORTED)
                        st["error"] = (
                            "not schedulable (KV cache too small: "
                            f"{self.kv_cache_config.num_blocks} blocks?)"
                        )
                        st["finished_s"] = clock
                        errors += 1
                        continue
                    if n_run + n_wait:
                        raise RuntimeError(
                            f"scheduler stalled at t={clock}: {n_run} running, {n_wait} waiting"
                        )
                    continue
                if len(queue) < depth and (executed or s.has_requests()):
                    continue
            elif not queue:
                if nxt >= n:
                    break
                clock = arrivals[order[nxt]]
                continue
            item = queue.pop()
            clock = max(clock, item[1])
            self._update(item, clock, by_id, absorb, a)

        pool._maybe_evict_cached_block = orig_evict
        if any(want.values()):
            raise RuntimeError(f"prefix-cache stats never reported: {want}")
        results, uncached_tot, prompt_tot = self._results(states)
        summary = {
            **tot,
            "uncached_common": uncached_tot,
            "prompt_tokens": prompt_tot,
            "steps": steps,
            "empty_steps": empty_steps,
            "scheduled_tokens": sched_tokens,
            "preemptions": preemptions,
            "requests_preempted": sum(1 for r in results if r["num_preemptions"]),
            "errors": errors,
            "evicted_blocks": evictions[0],
            "makespan_s": base._r9(clock),
            "running_time_mean": round(run_time / clock, 3) if clock else 0.0,
            "in_flight_time_mean": round(infl_time / clock, 3) if clock else 0.0,
            "running_max": run_max,
            "waiting_max": wait_max,
            "in_flight_max": infl_max,
            "kv_usage_max": round(usage_max, 6),
        }
        return results, summary

    @staticmethod
    def _admitted(st: dict, req, k: int, step: int, clock: float, want: dict) -> None:
        """An admission in this batch: what its lookup hit (computed tokens less the k
        scheduled), counted as vLLM's PrefixCacheStats count it."""
        hit_now = req.num_computed_tokens - k
        if st["admissions"] == 0:
            if req.num_preemptions != 0:
                raise RuntimeError(f"{st['rid']}: first admission after preemption?")
            ps = req.prefill_stats
            local = ps.num_local_cached_tokens if ps is not None else None
            if local != hit_now:
                raise RuntimeError(f"{st['rid']}: prefill_stats {local} != Request {hit_now}")
            st["first_step"] = step
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

    def _update(self, item, clock: float, by_id: dict, absorb, a) -> None:
        """update_from_output() of one queued batch at `clock`: each request it sampled for
        gets its next trace output (appended in order, so the index is its output count)."""
        from vllm.v1.outputs import ModelRunnerOutput

        so, _end, executed, sampling = item
        req_ids = list(so.num_scheduled_tokens)
        sampled = []
        for rid in req_ids:
            req = by_id[rid]["req"]
            if rid in sampling:
                j = req.num_output_tokens
                outs = by_id[rid]["outputs"]
                sampled.append([outs[j] if j < len(outs) else a.dummy_token])
            else:
                sampled.append([])
        mro = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=sampled,
        )
        absorb(self.scheduler.update_from_output(so, mro))
        for rid in req_ids:
            st = by_id[rid]
            req = st["req"]
            if st["first_token_s"] is None and req.num_output_tokens > 0:
                st["first_token_s"] = clock
            if st["finished_s"] is None and req.is_finished():
                st["finished_s"] = clock

    def _results(self, states: list[dict]) -> tuple[list[dict], int, int]:
        results = []
        uncached_tot = prompt_tot = 0
        for st in states:
            req = st["req"]
            junction = st["junction"]
            uncached = (junction - (st["local_cached"] or 0)) if junction else 0
            num_pre = req.num_preemptions if req is not None else 0
            if num_pre != st["preempted_seen"]:
                raise RuntimeError(
                    f"{st['rid']}: num_preemptions {num_pre} != {st['preempted_seen']} seen"
                )
            n_prompt = len(st["rec"]["prompt_token_ids"])
            res = {
                "request_id": st["rid"],
                "arrival_s": base._r9(st["arrival"]),
                "first_scheduled_s": base._r9(st["first_scheduled_s"]),
                "first_token_s": base._r9(st["first_token_s"]),
                "finished_s": base._r9(st["finished_s"]),
                "first_step": st["first_step"],
                "num_prompt_tokens": n_prompt,
                "num_output_tokens": req.num_output_tokens if req is not None else 0,
                "queried": st["queried"],
                "hit": st["hit"],
                "uncached_common": uncached,
                "junction": junction,
                "attn_match": st["hit"] + uncached,
                "num_preemptions": num_pre,
                "hit_total": st["hit_total"],
                "queried_total": st["queried_total"],
            }
            if not self.args.no_chunks:
                res["chunks"] = st["chunks"]
            if st["error"]:
                res["error"] = st["error"]
            results.append(res)
            uncached_tot += uncached
            prompt_tot += n_prompt
        return results, uncached_tot, prompt_tot


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--async-scheduling" not in argv:
        return base.main(argv)
    argv.remove("--async-scheduling")
    args = base.build_parser().parse_args(argv)
    if not args.concurrent:
        raise SystemExit("--async-scheduling needs --concurrent")
    if args.per_group:
        raise SystemExit("--per-group is not supported with --concurrent")
    if args.block_size is None:
        raise SystemExit("--block-size is required")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    warnings.filterwarnings("ignore")
    logging.getLogger("torch").setLevel(logging.ERROR)
    recs = base.synthetic_trace(args) if args.synthetic else base.load_trace(args.trace)
    arrivals = base.concurrent_arrivals(recs, args.time_scale)
    if args.max_num_batched_tokens is None:
        args.max_num_batched_tokens = 8192
    if args.max_num_seqs is None:
        args.max_num_seqs = 256
    longest = max(
        (len(r["prompt_token_ids"]) + len(r.get("output_token_ids") or []) for r in recs),
        default=1,
    )
    max_model_len = args.max_model_len or max(
        longest + 1, args.block_size, args.mamba_block_size or 0
    )
    t0 = time.perf_counter()
    oracle = AsyncOracle(args, max_model_len)
    t1 = time.perf_counter()
    desc = oracle.describe()
    sc = oracle.vllm_config.scheduler_config
    desc.update(
        {
            "mode": "concurrent",
            "async_scheduling": True,
            "max_num_seqs": sc.max_num_seqs,
            "max_num_batched_tokens": sc.max_num_batched_tokens,
            "time_scale": args.time_scale,
            "step_base_ms": args.step_base_ms,
            "step_token_us": args.step_token_us,
        }
    )
    print(json.dumps({"config": desc}), file=sys.stderr, flush=True)
    results, tot = oracle.run_async(recs, arrivals)
    t2 = time.perf_counter()
    out = sys.stdout
    if not args.quiet:
        for res in results:
            out.write(json.dumps(res) + "\n")
    summary = {
        "summary": True,
        "mode": "concurrent",
        **tot,
        "hit_rate": round(tot["hits"] / tot["queries"], 6) if tot["queries"] else 0.0,
        "free_blocks_end": oracle.kv_cache_manager.block_pool.get_num_free_blocks(),
    }
    out.write(json.dumps(summary) + "\n")
    out.flush()
    print(
        json.dumps({"timing": True, "replay_seconds": round(t2 - t1, 3), "setup_s": t1 - t0}),
        file=sys.stderr,
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
