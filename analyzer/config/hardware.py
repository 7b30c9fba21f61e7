"""Accelerators (their memory, and the peaks the step-time roofline of
`analyzer.config.step_time` divides by), and the arithmetic that turns a KV-cache pool into
GPUs: how many GPUs of one kind a replica needs to hold the model's weights and its cache
pool, and how many the whole deployment takes (`hpa plan` answers in blocks and GiB; a buyer
needs GPUs).

Pure arithmetic on bytes, with vLLM's memory rules as far as they can be stated without
running it; what is not modelled is said in `NOTE` and in each function's docstring.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from analyzer.config.memory import GIB
from analyzer.config.models import load_model
from analyzer.errors import ConfigError

# vLLM's default share of a GPU's memory for one engine (CacheConfig.gpu_memory_utilization,
# 0.9): the engine sizes weights + activations + KV cache to fit 0.9 x total memory.
GPU_MEMORY_UTILIZATION = 0.9
# The largest tensor-parallel size the automatic choice tries: 8 nodes of 8 GPUs, beyond
# which nobody runs one replica by tensor parallelism alone.
MAX_TENSOR_PARALLEL = 64
NOTE = (
    "vLLM also reserves activation workspace (found by profiling), CUDA graphs and non-torch "
    "memory out of the 0.9 x HBM; not modelled, so a real KV pool is somewhat smaller"
)


@dataclass(frozen=True)
class Gpu:
    """One accelerator: `name` as printed, `hbm_gib` its memory in GiB (the vendor's
    nominal size; the driver reports somewhat less, not modelled).

    The step-time roofline's peaks (None for a GPU known by its memory alone): dense tensor
    throughput in TFLOP/s for BF16 (`bf16_tflops`) and FP8 (`fp8_tflops`, None without FP8
    tensor cores), memory bandwidth (`hbm_tb_s`, TB/s = 1e12 B/s) and the tensor-parallel
    interconnect (`interconnect_gb_s`, GB/s = 1e9 B/s per GPU in each direction, what a ring
    all-reduce moves at)."""

    name: str
    hbm_gib: float
    bf16_tflops: float | None = None
    fp8_tflops: float | None = None
    hbm_tb_s: float | None = None
    interconnect_gb_s: float | None = None

    @property
    def usable_bytes(self) -> float:
        """Bytes vLLM's default gpu_memory_utilization lets one engine use on this GPU."""
        return GPU_MEMORY_UTILIZATION * self.hbm_gib * GIB

    @property
    def has_peaks(self) -> bool:
        """Whether the table gives the compute, memory and interconnect peaks."""
        return None not in (self.bf16_tflops, self.hbm_tb_s, self.interconnect_gb_s)


# Dense (not "with sparsity") peaks from the vendors' datasheets; the values BLIS's
# hardware_config.json (inference-sim/inference-sim) has agree where it has them (H100,
# A100-SXM, L40S BF16 and bandwidth). NVLink and Infinity Fabric are quoted as totals of
# both directions; the table halves them.
_ROWS = (
    # NVIDIA H100 SXM5 80 GB datasheet (nvidia.com/en-us/data-center/h100): BF16 1,979 and
    # FP8 3,958 TFLOPS with sparsity, HBM3 3.35 TB/s, NVLink 4 900 GB/s. BLIS: 989.5, 1979,
    # 3.35.
    Gpu("H100", 80.0, 989.5, 1979.0, 3.35, 450.0),
    # NVIDIA H200 SXM 141 GB datasheet (nvidia.com/en-us/data-center/h200): the H100's
    # tensor cores (BF16 1,979, FP8 3,958 with sparsity), HBM3e 4.8 TB/s, NVLink 900 GB/s.
    Gpu("H200", 141.0, 989.5, 1979.0, 4.8, 450.0),
    # NVIDIA HGX B200 datasheet (nvidia.com/en-us/data-center/hgx): 8 GPUs give FP16/BF16
    # 36 and FP8 72 PFLOPS with sparsity, 64 TB/s HBM3e; NVLink 5 1.8 TB/s per GPU.
    Gpu("B200", 192.0, 2250.0, 4500.0, 8.0, 900.0),
    # AMD Instinct MI300X data sheet (amd.com): BF16 1,307.4 and FP8 2,614.9 TFLOPS dense,
    # HBM3 5.3 TB/s, 7 Infinity Fabric links of 128 GB/s (896 GB/s) to the 7 peers.
    Gpu("MI300X", 192.0, 1307.4, 2614.9, 5.3, 448.0),
    # NVIDIA A100 SXM4 80 GB datasheet (nvidia.com/en-us/data-center/a100): BF16 312
    # TFLOPS dense, no FP8, HBM2e 2,039 GB/s, NVLink 3 600 GB/s. BLIS "A100-SXM": 312, 2.039.
    Gpu("A100", 80.0, 312.0, None, 2.039, 300.0),
    # NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s): BF16 362.05 and FP8 733
    # TFLOPS dense (733 / 1,466 with sparsity; BLIS's TFlopsFP8 1466 is the sparse figure),
    # GDDR6 864 GB/s, no NVLink: PCIe Gen4 x16, 64 GB/s both ways. BLIS: 362.05, 0.864.
    Gpu("L40S", 48.0, 362.05, 733.0, 0.864, 32.0),
)
# Keyed by the lower-case name: `--gpu h100` and `--gpu H100` are the same GPU.
GPUS: dict[str, Gpu] = {row.name.lower(): row for row in _ROWS}
GPU_NAMES: tuple[str, ...] = tuple(row.name for row in _ROWS)


def batch_defaults(gpu: Gpu) -> tuple[int, int]:
    """`vllm serve`'s (max_num_batched_tokens, max_num_seqs) on `gpu` when neither flag is
    given: vLLM 0.33 `EngineArgs.get_batch_defaults` (vllm/engine/arg_utils.py), the
    OPENAI_API_SERVER context: a GPU of at least 160 GiB (B200, MI300X) 16,384 tokens and
    1,024 sequences; at least 70 GiB and not an A100 (H100, H200) 8,192 and 1,024; any other
    (A100, L40S) 2,048 and 256. `_set_default_max_num_seqs_and_batched_tokens_args` then caps
    the sequences at the tokens. By the table's nominal memory (the driver reports a little
    less: H100 about 79 GiB, B200 about 178, on the same side of each threshold)."""
    if gpu.hbm_gib >= 160:
        tokens, seqs = 16384, 1024
    elif gpu.hbm_gib >= 70 and "a100" not in gpu.name.lower():
        tokens, seqs = 8192, 1024
    else:
        tokens, seqs = 2048, 256
    return tokens, min(seqs, tokens)


def gpu_memory(name: str | None, memory_gib: float | None) -> Gpu:
    """The GPU of `--gpu NAME` (a row of GPUS, any case) or of `--gpu-memory-gib X` (any
    other accelerator, X GiB of memory); exactly one of them. ConfigError otherwise, and for
    an unknown name (listing the known ones) or a memory that is not a positive finite
    number."""
    if name is not None and memory_gib is not None:
        raise ConfigError("give --gpu NAME or --gpu-memory-gib X, not both")
    if name is None and memory_gib is None:
        raise ConfigError(
            f"give --gpu NAME ({', '.join(GPU_NAMES)}) or --gpu-memory-gib X for another GPU"
        )
    if name is not None:
        row = GPUS.get(name.lower())
        if row is None:
            raise ConfigError(
                f"--gpu {name!r}: unknown GPU; known: {', '.join(GPU_NAMES)} "
                "(or --gpu-memory-gib X for another)"
            )
        return row
    # bool is an int to Python, never a memory size.
    if (
        isinstance(memory_gib, bool)
        or not isinstance(memory_gib, int | float)
        or not math.isfinite(memory_gib)
        or memory_gib <= 0
    ):
        raise ConfigError(f"--gpu-memory-gib {memory_gib!r}: expected a positive number of GiB")
    return Gpu(f"{memory_gib:g} GiB GPU", float(memory_gib))


def model_weights_bytes(model: str | None) -> int | None:
    """The BF16 weights' bytes of model preset or model file `model` (its `weights_bytes`);
    None without a model or when the file gives none. ConfigError for an unknown preset."""
    if model is None:
        return None
    return load_model(model).get("weights_bytes")


@dataclass(frozen=True)
class GpuPlan:
    """GPUs for a deployment's cache pools (see `gpu_plan`). Sizes in GiB (2**30 bytes),
    exact floats (the caller rounds for display); `*_per_gpu_gib` are one GPU's share under
    tensor parallel `tensor_parallel`.

    `cache_gib` / `weights_gib`: one replica's KV pool / weights; `weights_per_gpu_gib`,
    `kv_cache_per_gpu_gib`: their shares per GPU; `usable_per_gpu_gib`: 0.9 x `hbm_gib`;
    `kv_space_per_gpu_gib`: what a GPU has for KV after its weights (0 when they do not
    fit); `gpus_per_replica` = `tensor_parallel`; `total_gpus` = `num_caches` x that;
    `pool_blocks_fit`: blocks of the model's bytes_per_block the replica's GPUs hold
    (about vLLM's num_gpu_blocks; None without bytes_per_block); `message`: one line on
    why it does not fit, None when it fits; `note`: what is not modelled."""

    gpu: str
    hbm_gib: float
    tensor_parallel: int
    cache_gib: float
    weights_gib: float
    usable_per_gpu_gib: float
    weights_per_gpu_gib: float
    kv_cache_per_gpu_gib: float
    kv_space_per_gpu_gib: float
    gpus_per_replica: int
    num_caches: int
    total_gpus: int
    fits: bool
    pool_blocks_fit: int | None
    message: str | None
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION
    note: str = NOTE

    def as_dict(self) -> dict[str, Any]:
        """The plan as a JSON-able dict, one key per field, floats unrounded."""
        return asdict(self)


def gpu_plan(
    *,
    cache_bytes: int,
    weights_bytes: int,
    num_caches: int,
    gpu: Gpu,
    tensor_parallel: int | None,
    bytes_per_block: int | None = None,
) -> GpuPlan:
    """The GPUs `num_caches` cache pools need (pools = deployments x replicas, one replica
    each), every replica holding the model's `weights_bytes` and one pool of `cache_bytes`
    (num_blocks x bytes_per_block) on `gpu`s.

    Rules:
    - usable bytes per GPU = 0.9 x HBM, vLLM's default gpu_memory_utilization
      (CacheConfig.gpu_memory_utilization = 0.9);
    - tensor parallel N splits the weights and the KV cache evenly over N GPUs (assumes the
      heads divide evenly; vLLM replicates KV heads when N exceeds the KV-head count, which
      is not modelled);
    - KV space per GPU = usable - weights / N (vLLM's activation workspace is not modelled,
      `NOTE`);
    - it fits when weights / N < usable and cache_bytes / N <= the KV space per GPU;
    - `tensor_parallel` None: the smallest power of two N (1, 2, 4, ... 64) that fits, else
      64 with fits False; an integer N: that N, fitting or not;
    - total GPUs = num_caches x N.
    `bytes_per_block` (the model's): gives `pool_blocks_fit`, blocks the N GPUs' KV space
    holds. ConfigError for a tensor_parallel below 1."""
    _check_sizes(cache_bytes, weights_bytes, num_caches, bytes_per_block)
    if tensor_parallel is not None and (type(tensor_parallel) is not int or tensor_parallel < 1):
        raise ConfigError(f"--tensor-parallel {tensor_parallel!r}: expected an integer >= 1")
    usable = gpu.usable_bytes
    n = tensor_parallel
    if n is None:
        n = _smallest_holding(cache_bytes, weights_bytes, usable) or MAX_TENSOR_PARALLEL
    fits = _holds(cache_bytes, weights_bytes, n, usable)
    kv_space = max(0.0, usable - weights_bytes / n)
    blocks = None if bytes_per_block is None else math.floor(n * kv_space / bytes_per_block)
    return GpuPlan(
        gpu=gpu.name,
        hbm_gib=gpu.hbm_gib,
        tensor_parallel=n,
        cache_gib=cache_bytes / GIB,
        weights_gib=weights_bytes / GIB,
        usable_per_gpu_gib=usable / GIB,
        weights_per_gpu_gib=weights_bytes / n / GIB,
        kv_cache_per_gpu_gib=cache_bytes / n / GIB,
        kv_space_per_gpu_gib=kv_space / GIB,
        gpus_per_replica=n,
        num_caches=num_caches,
        total_gpus=num_caches * n,
        fits=fits,
        pool_blocks_fit=blocks,
        message=None if fits else _message(cache_bytes, weights_bytes, n, gpu),
    )


def _check_sizes(
    cache_bytes: int, weights_bytes: int, num_caches: int, bytes_per_block: int | None
) -> None:
    # These come from the planner, not from a user: a wrong one is a bug, not a ConfigError.
    for label, value, least in (
        ("cache_bytes", cache_bytes, 0),
        ("weights_bytes", weights_bytes, 0),
        ("num_caches", num_caches, 1),
        ("bytes_per_block", 1 if bytes_per_block is None else bytes_per_block, 1),
    ):
        if type(value) is not int or value < least:
            raise ValueError(f"gpu_plan: {label} must be an integer >= {least}, got {value!r}")


def _holds(cache_bytes: int, weights_bytes: int, n: int, usable: float) -> bool:
    # Per GPU: weights/n < usable (some room left for KV: vLLM refuses to start without)
    # and cache/n <= usable - weights/n; multiplied by n to compare whole bytes.
    return weights_bytes < n * usable and weights_bytes + cache_bytes <= n * usable


def _smallest_holding(cache_bytes: int, weights_bytes: int, usable: float) -> int | None:
    """The smallest power of two N up to MAX_TENSOR_PARALLEL whose GPUs hold the weights
    and the cache, None when none does."""
    n = 1
    while n <= MAX_TENSOR_PARALLEL:
        if _holds(cache_bytes, weights_bytes, n, usable):
            return n
        n *= 2
    return None


def _message(cache_bytes: int, weights_bytes: int, n: int, gpu: Gpu) -> str:
    """One line on why `n` GPUs do not hold a replica, and the tensor parallel that would."""
    usable = gpu.usable_bytes
    better = _smallest_holding(cache_bytes, weights_bytes, usable)
    if weights_bytes >= n * usable:
        what = (
            f"the weights alone ({_gib(weights_bytes / n)} GiB per GPU at TP {n}) exceed "
            f"{GPU_MEMORY_UTILIZATION:g} x {gpu.hbm_gib:g} GiB per {gpu.name}"
        )
    else:
        kv_space = usable - weights_bytes / n
        what = (
            f"a replica's {_gib(cache_bytes)} GiB cache does not fit {n} x {gpu.name} "
            f"(KV space {_gib(kv_space)} GiB per GPU)"
        )
    if better is None:
        return f"{what}; no tensor parallel up to {MAX_TENSOR_PARALLEL} holds the replica"
    return f"{what}; --tensor-parallel {better} would hold the replica"


def _gib(num_bytes: float) -> str:
    """Bytes as GiB for a message, one decimal."""
    return f"{num_bytes / GIB:,.1f}"
