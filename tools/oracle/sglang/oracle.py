"""SGLang 0.5.23's own radix cache, driven serially on the CPU: the ground truth for hpa's
`sglang` engine (a development check in its own venv, never a dependency of `make test`).

Each request of a JSONL trace (request_id, prompt_token_ids, output_token_ids) runs to the end
before the next one arrives, through the functions SGLang's scheduler calls:

  admission  Req.init_next_round_input -> UnifiedRadixCache.match_prefix; the real
             PrefillAdder.add_one_req / add_chunked_req pick the chunk lengths
  per chunk  ScheduleBatch.init_new(...).prepare_for_extend() (real allocation, eviction and
             the Mamba track point); between chunks checkpoint_kv_cache (cache_unfinished_req)
  prefill    the fake model samples output_token_ids[0] (1 without outputs); a request that is
  result     not finished is checkpointed, as SchedulerBatchResultProcessor does
  decode     one ScheduleBatch.prepare_for_decode() per further output token (real KV
             allocation and decode track mask), then the real result processor's
             _handle_finish_state_updated_req (track point, ping-pong swap, release at the end)

Faked: the model (states are never computed, only their slots are kept), the scheduler loop
(one request at a time, no overlap), model_config, torchvision (tvstub). One JSON line per
request, a summary line last.

    python oracle.py --trace T.jsonl --layout mamba --strategy extra_buffer --page 64
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from array import array
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tvstub  # noqa: E402

tvstub.install()

import torch  # noqa: E402

# Pinned host memory only speeds a copy to a GPU; on the CPU it cannot be had, and the
# decode track mask asks for it (ScheduleBatch.prepare_for_decode).
torch.Tensor.pin_memory = lambda self, *args, **kwargs: self

from sglang.kernels.ops.attention.fla.chunk_delta_h import CHUNK_SIZE as FLA_CHUNK  # noqa: E402
from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape  # noqa: E402
from sglang.srt.environ import envs  # noqa: E402
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch  # noqa: E402
from sglang.srt.managers.schedule_policy import PrefillAdder  # noqa: E402
from sglang.srt.managers.scheduler_components.batch_result_processor import (  # noqa: E402
    SchedulerBatchResultProcessor,
)
from sglang.srt.mem_cache.allocator import (  # noqa: E402
    PagedTokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache  # noqa: E402
from sglang.srt.mem_cache.memory_pool import (  # noqa: E402
    HybridLinearKVPool,
    HybridReqToTokenPool,
    ReqToTokenPool,
)
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool  # noqa: E402
from sglang.srt.mem_cache.unified_cache.components.base import ComponentType as CT  # noqa: E402
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache  # noqa: E402
from sglang.srt.runtime_context import get_exec, mamba_cache_chunk_size  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

VERSION = "sglang 0.5.23"
NUM_LAYERS = 8
FULL_LAYERS = (3, 7)  # a tiny model: 8 layers, 2 of full attention
MAX_REQS = 8


def _server_args(a) -> None:
    sa = ServerArgs(
        model_path="dummy",
        page_size=a.page,
        mamba_radix_cache_strategy=a.strategy,
        chunked_prefill_size=a.chunk,
        disable_overlap_schedule=True,  # one request at a time: nothing to overlap with
        mamba_track_interval=a.track_interval,
    )
    # what the model's config supplies on a real server (SGLang's unit tests do the same)
    sa._mamba_cache_chunk_size = max(FLA_CHUNK, a.page)
    set_global_server_args_for_scheduler(sa)


class Engine:
    """One cache, its pools and allocator, built as SGLang's model runner builds them."""

    def __init__(self, a) -> None:
        _server_args(a)
        self.page, self.chunk, self.layout = a.page, a.chunk, a.layout
        other = [i for i in range(NUM_LAYERS) if i not in FULL_LAYERS]
        mamba_layers = other if a.layout == "mamba" else other[:3] if a.layout == "all" else []
        swa_layers = [] if a.layout == "mamba" else other[3:] if a.layout == "all" else other
        extra = get_exec().mamba.enable_mamba_extra_buffer
        ctx = max(a.kv_tokens, 8192)
        if mamba_layers:
            with envs.SGLANG_MAMBA_SSM_DTYPE.override("bfloat16"):
                shape = Mamba2StateShape.create(
                    tp_world_size=1,
                    intermediate_size=32,
                    n_groups=1,
                    num_heads=2,
                    head_dim=16,
                    state_size=4,
                    conv_kernel=4,
                )
            self.r2t = HybridReqToTokenPool(
                size=MAX_REQS,
                mamba_size=a.num_states,
                mamba_spec_state_size=MAX_REQS,
                max_context_len=ctx,
                device="cpu",
                enable_memory_saver=False,
                cache_params=Mamba2CacheParams(shape=shape, layers=mamba_layers),
                mamba_layer_ids=mamba_layers,
                enable_mamba_extra_buffer=extra,
                speculative_num_draft_tokens=3,
            )
        else:
            self.r2t = ReqToTokenPool(
                size=MAX_REQS, max_context_len=ctx, device="cpu", enable_memory_saver=False
            )
        self.alloc = self._allocator(a, swa_layers, mamba_layers)
        components = (
            (CT.FULL,) + ((CT.SWA,) if swa_layers else ()) + ((CT.MAMBA,) if mamba_layers else ())
        )
        self.cache = UnifiedRadixCache(
            params=CacheInitParams(
                req_to_token_pool=self.r2t,
                token_to_kv_pool_allocator=self.alloc,
                page_size=a.page,
                disable=False,
                tree_components=components,
                enable_mamba_extra_buffer=extra,
                eviction_policy="lru",
                sliding_window_size=a.window if swa_layers else None,
                chunked_prefill_size=a.chunk,
            )
        )
        self.model_config = SimpleNamespace(
            vocab_size=32000,
            is_encoder_decoder=False,
            hf_text_config=SimpleNamespace(mamba_chunk_size=FLA_CHUNK),
        )
        self.processor = _processor(self.cache)
        self.evicted = {"kv_tokens": 0, "swa_tokens": 0, "states": 0}
        self._count_evictions()
        self._record_matches()
        self.info = dict(
            oracle=VERSION,
            layout=a.layout,
            components=[c.name for c in components],
            strategy=a.strategy,
            page=a.page,
            chunked_prefill_size=a.chunk,
            extra_buffer=extra,
            mamba_cache_chunk_size=mamba_cache_chunk_size(),
            track_interval=get_exec().mamba.mamba_track_interval,
            kv_tokens=a.kv_tokens,
            num_states=a.num_states if mamba_layers else None,
            window=a.window if swa_layers else None,
            swa_tokens=a.swa_tokens if swa_layers else None,
            tree_core=getattr(self.cache, "_tree_core_backend", "?"),
        )

    def _allocator(self, a, swa_layers, mamba_layers):
        dtype = torch.bfloat16
        if swa_layers:
            kv = SWAKVPool(
                size=a.kv_tokens,
                size_swa=a.swa_tokens,
                page_size=a.page,
                dtype=dtype,
                head_num=1,
                head_dim=8,
                swa_attention_layer_ids=swa_layers,
                full_attention_layer_ids=list(FULL_LAYERS),
                device="cpu",
            )
            return SWATokenToKVPoolAllocator(
                size=a.kv_tokens,
                size_swa=a.swa_tokens,
                page_size=a.page,
                dtype=dtype,
                device="cpu",
                kvcache=kv,
                need_sort=False,
            )
        kv = HybridLinearKVPool(
            size=a.kv_tokens,
            dtype=dtype,
            page_size=a.page,
            head_num=1,
            head_dim=8,
            full_attention_layer_ids=list(FULL_LAYERS),
            device="cpu",
            enable_memory_saver=False,
            mamba_pool=self.r2t.mamba_pool,
        )
        if a.page == 1:
            return TokenToKVPoolAllocator(
                size=a.kv_tokens, dtype=dtype, device="cpu", kvcache=kv, need_sort=False
            )
        return PagedTokenToKVPoolAllocator(
            size=a.kv_tokens,
            page_size=a.page,
            dtype=dtype,
            device="cpu",
            kvcache=kv,
            need_sort=False,
        )

    def _count_evictions(self) -> None:
        for name in ("evict", "evict_for_alloc"):
            real = getattr(self.cache, name, None)
            if real is None:
                continue

            def counted(params, _real=real):
                result = _real(params)
                if result is not None:
                    self.evicted["kv_tokens"] += int(getattr(result, "num_tokens_evicted", 0) or 0)
                    self.evicted["swa_tokens"] += int(
                        getattr(result, "swa_num_tokens_evicted", 0) or 0
                    )
                    self.evicted["states"] += int(getattr(result, "mamba_num_evicted", 0) or 0)
                return result

            setattr(self.cache, name, counted)

    def _record_matches(self) -> None:
        self.last_match = None
        real = self.cache.match_prefix

        def match_prefix(params):
            self.last_match = real(params)
            return self.last_match

        self.cache.match_prefix = match_prefix

    def adder(self) -> PrefillAdder:
        running = ScheduleBatch(reqs=[], batch_is_full=False)
        return PrefillAdder(self.page, self.cache, self.alloc, running, 0.7, 16384, self.chunk)

    def batch(self, adder: PrefillAdder, chunked) -> ScheduleBatch:
        return ScheduleBatch.init_new(
            adder.can_run_list,
            self.r2t,
            self.alloc,
            self.cache,
            self.model_config,
            False,
            SpeculativeAlgorithm.NONE,
            chunked_req=chunked,
        )

    def run(self, rid: str, prompt: list[int], outputs: list[int]) -> dict:
        before = dict(self.evicted)
        sampled = list(outputs) or [1]
        params = SamplingParams(temperature=0, max_new_tokens=len(sampled), ignore_eos=True)
        params.normalize(None)
        req = Req(
            rid=rid,
            origin_input_text="",
            origin_input_ids=array("q", prompt),
            sampling_params=params,
        )
        adder = self.adder()
        req.init_next_round_input(self.cache)
        match = self.last_match
        record = dict(
            request_id=rid,
            num_prompt_tokens=len(prompt),
            num_output_tokens=len(outputs),
            hit=int(req.prefix_len),
            full_kv_hit=int(match.full_kv_hit_length),
        )
        result = adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
        if req not in adder.can_run_list:
            record.update(error=f"not admitted: {result}")
            return record
        chunked = adder.new_chunked_req
        chunks, tracks = [], []
        while True:
            batch = self.batch(adder, chunked)
            batch.prepare_for_extend()
            chunks.append(int(req.extend_len))
            tracks.append(req.kv.mamba_last_track_seqlen)
            if chunked is None:
                break
            checkpoint_kv_cache(req, self.cache)  # Scheduler.stash_chunked_request
            adder = self.adder()
            req.init_next_round_input()
            chunked = adder.add_chunked_req(req)
        req.output_ids.append(sampled[0])
        req.update_finish_state()
        decode_steps = 0
        if req.finished():
            release_kv_cache(req, self.cache, checkpoint=True)
        else:
            checkpoint_kv_cache(req, self.cache)
            decode_steps = self._decode(req, batch, sampled[1:])
        record.update(
            chunks=chunks,
            decode_steps=decode_steps,
            track_seqlens=[t for t in tracks if t is not None],
            evicted={k: self.evicted[k] - before[k] for k in self.evicted},
            free_kv_tokens=int(self.alloc.available_size()),
        )
        if hasattr(self.alloc, "swa_available_size"):
            record["free_full_tokens"] = int(self.alloc.full_available_size())
            record["free_swa_tokens"] = int(self.alloc.swa_available_size())
        mamba = getattr(self.r2t, "mamba_allocator", None)
        if mamba is not None:
            record["free_states"] = int(mamba.available_size())
        return record

    def _decode(self, req, batch: ScheduleBatch, tokens: list[int]) -> int:
        """The running request's decode steps, as the scheduler's decode loop and result
        processor run them for one request without overlap."""
        batch.filter_batch()
        result = SimpleNamespace(num_correct_drafts_per_req_cpu=None, grammar_retained_tokens=None)
        for steps, token in enumerate(tokens, 1):
            batch.prepare_for_decode()
            req.output_ids.append(token)
            req.update_finish_state(1)
            self.processor._handle_finish_state_updated_req(req, batch, result, 0, None)
            if req.finished():
                return steps
        raise AssertionError(f"{req.rid}: not finished after its output tokens")


class _Processor(SchedulerBatchResultProcessor):
    """The scheduler's own result processor; what a CPU serial run lacks does nothing."""

    def _maybe_collect_routed_experts(self, req) -> None:
        pass

    def _maybe_collect_indexer_topk(self, req) -> None:
        pass

    def _maybe_collect_customized_info(self, *args, **kwargs) -> None:
        pass


def _processor(cache) -> SchedulerBatchResultProcessor:
    p = _Processor.__new__(_Processor)
    fields = dict(tree_cache=cache, draft_worker=None, model_worker=None, enable_overlap=False)
    for name, value in fields.items():  # a frozen dataclass: set as its __init__ would
        object.__setattr__(p, name, value)
    return p


def _read(path: str):
    with open(path) as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                yield (
                    str(rec["request_id"]),
                    [int(t) for t in rec["prompt_token_ids"]],
                    [int(t) for t in rec.get("output_token_ids") or []],
                )


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", help="JSONL: request_id, prompt_token_ids, output_token_ids")
    ap.add_argument(
        "--batch",
        help="JSONL of cases, each {name, args: {flag: value}, "
        "requests: [...]}: one process runs them all, each on a fresh cache",
    )
    ap.add_argument(
        "--layout",
        default="mamba",
        choices=["mamba", "swa", "all"],
        help="full attention + mamba, + sliding window, or all three",
    )
    ap.add_argument("--strategy", default="no_buffer", choices=["no_buffer", "extra_buffer"])
    ap.add_argument("--page", type=int, default=1, help="page_size (tokens)")
    ap.add_argument("--chunk", type=int, default=8192, help="chunked_prefill_size (tokens)")
    ap.add_argument("--track-interval", type=int, default=256, help="mamba_track_interval")
    ap.add_argument("--kv-tokens", type=int, default=1 << 20, help="full-attention KV pool")
    ap.add_argument("--num-states", type=int, default=1024, help="Mamba state slots")
    ap.add_argument("--window", type=int, default=256, help="sliding window (tokens)")
    ap.add_argument(
        "--swa-tokens",
        type=int,
        default=None,
        help="SWA KV pool (tokens; default the full pool's size)",
    )
    ap.add_argument(
        "--backend",
        default="rust",
        choices=["rust", "python"],
        help="TreeCore backend (SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND)",
    )
    return ap


def _args(ap: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    a = ap.parse_args(argv)
    a.swa_tokens = a.swa_tokens or a.kv_tokens
    return a


def replay(a: argparse.Namespace, requests, name: str | None = None):
    """Yield the config line, one line per request and the summary line."""
    os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] = a.backend
    engine = Engine(a)
    tag = {} if name is None else {"case": name}
    yield {**tag, "config": engine.info}
    totals = dict(requests=0, prompt_tokens=0, hits=0, errors=0)
    for rid, prompt, outputs in requests:
        rec = engine.run(rid, prompt, outputs)
        totals["requests"] += 1
        totals["prompt_tokens"] += len(prompt)
        totals["hits"] += rec["hit"]
        totals["errors"] += "error" in rec
        yield {**tag, **rec}
    evicted = {f"evicted_{k}": v for k, v in engine.evicted.items()}
    yield {**tag, "summary": True, **totals, **evicted}


def main(argv=None) -> int:
    ap = _parser()
    a = _args(ap, argv)
    if a.batch:
        with open(a.batch) as f:
            for line in f:
                if not line.strip():
                    continue
                case = json.loads(line)
                flags = [f"--{k}={v}" for k, v in case.get("args", {}).items()]
                requests = [
                    (str(r["request_id"]), r["prompt_token_ids"], r.get("output_token_ids") or [])
                    for r in case["requests"]
                ]
                try:
                    lines = list(replay(_args(ap, flags), requests, case["name"]))
                except Exception as exc:  # a setting SGLang refuses: the case says so
                    lines = [{"case": case["name"], "oracle_error": f"{type(exc).__name__}: {exc}"}]
                for out in lines:
                    print(json.dumps(out), flush=True)
        return 0
    if not a.trace:
        ap.error("--trace or --batch is required")
    for out in replay(a, _read(a.trace)):
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
