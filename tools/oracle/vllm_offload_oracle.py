#!/usr/bin/env python3
"""vLLM 0.33's host KV tier on the CPU: the real `Scheduler` with the `OffloadingConnector`.

    <oracle python> tools/oracle/vllm_offload_oracle.py --trace T.jsonl --block-size 16 \\
        --num-gpu-blocks 40 --host-chunks 64 [--eviction-policy arc] [--concurrent] ...

Every flag of the oracle (``../shared/oracle/vllm_oracle.py``, or ``$HPA_ORACLE_SCRIPT``) is
accepted, and its configs are built the same way; then the `VllmConfig` gains a
`KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both")` and the scheduler is
built again, so that it builds vLLM's own scheduler-side connector
(`OffloadingConnectorScheduler`) with vLLM's `CPUOffloadingManager` and its LRU or ARC policy.
The host tier holds exactly ``--host-chunks`` chunks: the spec is vLLM's `CPUOffloadingSpec`
loaded through its out-of-tree hook (``spec_name`` + ``spec_module_path``:
`oracle_offload_spec.OracleCPUSpec`) with `num_chunks` pinned.

Only the worker is faked, as `OffloadingConnectorWorker` reports (its ``get_finished``): the
loads a step's metadata carries complete in that step (``finished_recving`` for the async
ones, ``completed_jobs`` for all), the store jobs it carries are submitted at the start of the
next step and complete in that step's output, and ``jobs_to_flush`` complete in the step that
asks. Completions go back in the ``KVConnectorOutput`` of the step's `ModelRunnerOutput`, so
the scheduler processes them in `update_from_output` as it would a real worker's.

Serial (default): each request is added once the one before it has finished and the
connector has no job left (its last stores are readable), then stepped until it finishes.
``--concurrent``: requests are added on the base oracle's simulated clock (timestamp x
``--time-scale``; a step lasts ``--step-base-ms`` + ``--step-token-us`` per scheduled token,
``--step-base-ms`` when it schedules none but the connector still works).

Output: one JSON object per request, then a summary (``"summary": true``):
  request_id, num_prompt_tokens
  gpu_hit        local (GPU prefix cache) hit at admission: prefill_stats.num_local_cached_tokens
  host_hit       the connector's external hit: prefill_stats.num_external_cached_tokens
  wait_steps     steps the request spent in WAITING_FOR_REMOTE_KVS (its host load)
  delay_steps    steps from being added to its first scheduled tokens (wait_steps, deferred
                 lookups and the queue)
  loaded_keys    host keys its load jobs read (one per chunk and group)
  chunks         scheduled tokens of each step it ran in
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCRIPT = os.environ.get("HPA_ORACLE_SCRIPT") or str(REPO / "../shared/oracle/vllm_oracle.py")
# More steps than this with nothing scheduled and no transfer under way: a stall (an error).
MAX_IDLE_STEPS = 16


def _load_oracle():
    spec = importlib.util.spec_from_file_location("vllm_oracle", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


base = _load_oracle()


def build_parser():
    p = base.build_parser()
    p.add_argument(
        "--host-chunks",
        type=int,
        required=True,
        help="host tier capacity in chunks (CPUOffloadingManager num_chunks)",
    )
    p.add_argument("--eviction-policy", choices=["lru", "arc"], default="lru")
    p.add_argument("--blocks-per-chunk", type=int, default=1)
    p.add_argument(
        "--offload-decode",
        action="store_true",
        help="offload_prompt_only=false: decode tokens are offered too",
    )
    return p


class OffloadOracle(base.Oracle):
    """The base oracle's configs, with the OffloadingConnector and a fake worker."""

    def __init__(self, args, max_model_len: int) -> None:
        super().__init__(args, max_model_len)
        from vllm.config import KVTransferConfig
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.structured_output import StructuredOutputManager

        if str(HERE) not in sys.path:
            sys.path.insert(0, str(HERE))  # spec_module_path resolves from here
        config = self.vllm_config
        config.kv_transfer_config = KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config={
                "spec_name": "OracleCPUSpec",
                "spec_module_path": "oracle_offload_spec",
                "cpu_bytes_to_use": 1,
                "num_cpu_chunks": args.host_chunks,
                "eviction_policy": args.eviction_policy,
                "blocks_per_chunk": args.blocks_per_chunk,
                "offload_prompt_only": not args.offload_decode,
            },
        )
        self.scheduler = Scheduler(
            vllm_config=config,
            kv_cache_config=self.kv_cache_config,
            structured_output_manager=StructuredOutputManager(config),
            block_size=self.scheduler_block_size,
            hash_block_size=self.hash_block_size,
            log_stats=True,
        )
        self.kv_cache_manager = self.scheduler.kv_cache_manager
        self.offload = self.scheduler.connector.connector_scheduler
        self.deferred: set[int] = set()  # store jobs planned last step: done this step
        self.num_steps = 0
        self.track: dict[str, dict] = {}
        self.jobs = {"loads": 0, "stores": 0, "flushes": 0}

    # -- one engine step: schedule, the fake worker, update -----------------------------

    def step(self) -> dict[str, int]:
        """Run one step; returns the tokens scheduled per request."""
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
            OffloadingWorkerMetadata,
        )
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
        from vllm.v1.request import RequestStatus

        s = self.scheduler
        so = s.schedule()
        meta = so.kv_connector_metadata
        for st in self.track.values():
            # The hits of the admission: the scheduler sets the stats at every attempt (one
            # that then does not fit leaves them set and the request waiting), so they are
            # read until the request leaves WAITING, before an output takes them.
            req = st["req"]
            ps = req.prefill_stats
            if st["admitted"] or ps is None or not ps.num_prompt_tokens:
                continue
            st["gpu_hit"] = ps.num_local_cached_tokens
            st["host_hit"] = ps.num_external_cached_tokens
            st["admitted"] = req.status != RequestStatus.WAITING
        done = dict.fromkeys(self.deferred, 1)
        for jid in meta.jobs_to_flush or ():
            done[jid] = 1
            self.jobs["flushes"] += 1
        recv = set()
        for jid, job in meta.load_jobs.items():
            done[jid] = 1
            if not job.sync:
                recv.add(job.req_id)
            st = self.track.get(job.req_id)
            if st is not None:
                st["loaded_keys"] += len(job.src_spec.block_ids)  # host chunks read
        self.jobs["loads"] += len(meta.load_jobs)
        self.jobs["stores"] += len(meta.store_jobs)
        self.deferred = set(meta.store_jobs) - set(done)
        nst = dict(so.num_scheduled_tokens)
        req_ids = list(nst)
        sampled = []
        for rid in req_ids:
            st = self.track[rid]
            req = st["req"]
            st["chunks"].append(nst[rid])
            if st["first_step"] is None:
                st["first_step"] = self.num_steps
            if req.num_computed_tokens >= req.num_tokens:  # a sampling step
                j = req.num_output_tokens
                outs = st["outputs"]
                sampled.append([outs[j] if j < len(outs) else self.args.dummy_token])
            else:
                sampled.append([])
        for st in self.track.values():
            if st["req"].status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                st["wait_steps"] += 1
        mro = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=sampled,
            kv_connector_output=KVConnectorOutput(
                finished_recving=recv,
                kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=done),
            ),
        )
        s.update_from_output(so, mro)
        self.num_steps += 1
        return nst

    def add(self, rec: dict) -> dict:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        rid = str(rec["request_id"])
        if rid in self.track:
            raise SystemExit(f"duplicate request_id {rid!r}")
        prompt = [int(t) for t in rec["prompt_token_ids"]]
        outputs = [int(t) for t in (rec.get("output_token_ids") or [])]
        req = Request(
            request_id=rid,
            prompt_token_ids=prompt,
            sampling_params=SamplingParams(max_tokens=max(1, len(outputs)), ignore_eos=True),
            pooling_params=None,
            arrival_time=float(self.num_steps),
            block_hasher=self.block_hasher,
        )
        st = {
            "req": req,
            "outputs": outputs,
            "added_step": self.num_steps,
            "first_step": None,
            "admitted": False,
            "gpu_hit": None,
            "host_hit": None,
            "wait_steps": 0,
            "loaded_keys": 0,
            "chunks": [],
            "error": None,
        }
        self.track[rid] = st
        self.scheduler.add_request(req)
        return st

    def result(self, rid: str) -> dict:
        st = self.track[rid]
        req = st["req"]
        res = {
            "request_id": rid,
            "num_prompt_tokens": req.num_prompt_tokens,
            "gpu_hit": st["gpu_hit"] or 0,
            "host_hit": st["host_hit"] or 0,
            "wait_steps": st["wait_steps"],
            "delay_steps": (
                st["first_step"] - st["added_step"] if st["first_step"] is not None else None
            ),
            "loaded_keys": st["loaded_keys"],
            "preemptions": req.num_preemptions,
            "chunks": st["chunks"],
        }
        if st["error"]:
            res["error"] = st["error"]
        return res

    def _abort(self, rid: str, why: str) -> None:
        from vllm.v1.request import RequestStatus

        self.scheduler.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
        self.track[rid]["error"] = why

    # -- the two schedules ------------------------------------------------------------

    def run_serial(self, recs: list[dict]) -> list[dict]:
        out = []
        for rec in recs:
            st = self.add(rec)
            rid = st["req"].request_id
            idle = 0
            while self.scheduler.has_requests():
                nst = self.step()
                idle = 0 if (nst or self.deferred or self._in_flight()) else idle + 1
                if idle > MAX_IDLE_STEPS and not st["req"].is_finished():
                    self._abort(
                        rid,
                        "not schedulable (KV cache too small: "
                        f"{self.kv_cache_config.num_blocks} blocks?)",
                    )
            out.append(self.result(rid))
        return out

    def _in_flight(self) -> bool:
        return bool(self.offload._jobs)

    def run_concurrent(self, recs: list[dict], arrivals: list[float]) -> list[dict]:
        a = self.args
        order = sorted(range(len(recs)), key=lambda i: (arrivals[i], i))
        clock, nxt, idle = 0.0, 0, 0
        while True:
            while nxt < len(order) and arrivals[order[nxt]] <= clock:
                self.add(recs[order[nxt]])
                nxt += 1
            if not self.scheduler.has_requests():
                if nxt >= len(order):
                    break
                clock = arrivals[order[nxt]]
                continue
            nst = self.step()
            tokens = sum(nst.values())
            clock += a.step_base_ms / 1e3 + a.step_token_us / 1e6 * tokens
            idle = 0 if (nst or self.deferred or self._in_flight()) else idle + 1
            if idle > MAX_IDLE_STEPS:
                n_run, n_wait = self.scheduler.get_request_counts()
                raise SystemExit(
                    f"stalled at step {self.num_steps}: {n_run} running, "
                    f"{n_wait} waiting, nothing scheduled"
                )
        return [self.result(str(rec["request_id"])) for rec in recs]

    def describe(self) -> dict:
        desc = super().describe()
        mgr = self.offload.manager
        desc.update(
            {
                "connector": type(self.scheduler.connector).__name__,
                "offload_manager": type(mgr).__name__,
                "host_chunks": mgr._num_chunks,
                "eviction_policy": self.args.eviction_policy,
                "blocks_per_chunk": self.args.blocks_per_chunk,
                "offload_prompt_only": not self.args.offload_decode,
            }
        )
        return desc


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.block_size is None:
        raise SystemExit("--block-size is required")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    warnings.filterwarnings("ignore")
    logging.getLogger("torch").setLevel(logging.ERROR)
    recs = base.load_trace(args.trace)
    longest = max(
        (len(r["prompt_token_ids"]) + len(r.get("output_token_ids") or []) for r in recs), default=1
    )
    max_model_len = args.max_model_len or max(longest + 1, args.block_size)
    if args.concurrent:
        arrivals = base.concurrent_arrivals(recs, args.time_scale)
        args.max_num_batched_tokens = args.max_num_batched_tokens or 8192
        args.max_num_seqs = args.max_num_seqs or 256
    oracle = OffloadOracle(args, max_model_len)
    print(json.dumps({"config": oracle.describe()}), file=sys.stderr, flush=True)
    if args.concurrent:
        results = oracle.run_concurrent(recs, arrivals)
    else:
        results = oracle.run_serial(recs)
    for res in results:
        sys.stdout.write(json.dumps(res) + "\n")
    summary = {
        "summary": True,
        "mode": "concurrent" if args.concurrent else "serial",
        "requests": len(results),
        "prompt_tokens": sum(r["num_prompt_tokens"] for r in results),
        "gpu_hits": sum(r["gpu_hit"] for r in results),
        "host_hits": sum(r["host_hit"] for r in results),
        "wait_steps": sum(r["wait_steps"] for r in results),
        "steps": oracle.num_steps,
        "load_jobs": oracle.jobs["loads"],
        "store_jobs": oracle.jobs["stores"],
        "flushed_jobs": oracle.jobs["flushes"],
        "errors": sum("error" in r for r in results),
    }
    sys.stdout.write(json.dumps(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
