"""The sort matcher on a device: its per-unit steps as the fused kernels of
`sort_kernels.cu`, the sort by CuPy (CUB's radix sort), memory sized before the run.

`FusedSteps` implements `sort_match.Steps` over any `Kernels` (something that launches a
kernel of that source by name): `CudaKernels` is the CUDA module, compiled once per
machine by NVRTC and cached on disk by CuPy; the tests build the same source for the host
(`-DHPA_HOST`) and hold `FusedSteps` equal to the plain `SortSteps` and the radix tree.

Fields modelled (an allow-list, as the vLLM fast paths keep): units as int32 or int64, a
request's units anywhere in `flat` (`starts`), namespaces per view, query lengths, hash
constants (base, key mask). Anything else the matcher learns runs the plain steps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

import numpy as np

from analyzer.prefixes.arrays import Array
from analyzer.prefixes.backend import backend_name
from analyzer.prefixes.prefix_hash import KEY_SPREAD, HashParams, namespace_seeds
from analyzer.prefixes.sort_match import SortAnswers, ViewRows, sort_match
from analyzer.prefixes.source import RequestMeta

# Device bytes a unit of the largest view needs while it is sorted: the units (4 or 8),
# the running sum (8), key and row (16), CuPy's argsort index and CUB's alternates (24),
# the sorted key and row (16); the plan sizes passes from it, with room to spare.
DEVICE_BYTES_PER_UNIT = 80
DEVICE_USE = 0.7  # the share of the free device memory a run plans to use
THREADS = 256


def source_text() -> str:
    """The kernels' CUDA source (also valid C with -DHPA_HOST)."""
    return resources.files("analyzer.prefixes").joinpath("sort_kernels.cu").read_text()


class Kernels(Protocol):
    def launch(self, name: str, count: int, *args: Any) -> None:
        """Run kernel `name` over `count` indices; arrays are the backend's, scalars are
        np.int64 / np.uint64."""


class CudaKernels:
    """`sort_kernels.cu` as one CuPy RawModule: one NVRTC compile per machine (CuPy keeps
    it in its cache folder), loaded once per process."""

    _module = None
    _lock = threading.Lock()

    def __init__(self, cupy: Any) -> None:
        self.cupy = cupy
        with CudaKernels._lock:
            if CudaKernels._module is None:
                module = cupy.RawModule(code=source_text(), options=("-std=c++14",))
                module.compile()
                CudaKernels._module = module
        self.module = CudaKernels._module

    def launch(self, name: str, count: int, *args: Any) -> None:
        if count <= 0:
            return
        blocks = min(-(-count // THREADS), 65535 * 16)
        self.module.get_function(name)((blocks,), (THREADS,), args)


def host_allocator(xp: Any):
    """How the ids are allocated on the host for `xp`: page-locked memory for CuPy (its copy
    to the device is one DMA transfer, not staged through a bounce buffer), else np.empty."""
    if backend_name(xp) != "cupy":
        return np.empty
    cupy = xp._cp

    def pinned(size: int, dtype: Any) -> np.ndarray:
        dtype = np.dtype(dtype)
        memory = cupy.cuda.alloc_pinned_memory(max(size, 1) * dtype.itemsize)
        return np.frombuffer(memory, dtype=dtype, count=size)  # keeps `memory` alive

    return pinned


def warm_up() -> threading.Thread:
    """Start CUDA and load the kernels in a thread (while the ids are read)."""

    def load() -> None:
        try:
            import cupy

            CudaKernels(cupy)
        except Exception:  # the run that needs it raises the same error, in its place
            pass

    thread = threading.Thread(target=load, name="hpa-cuda-warm-up", daemon=True)
    thread.start()
    return thread


class FusedSteps:
    """`sort_match.Steps` with steps 1, 3 and 4 as the fused kernels."""

    def __init__(self, flat: Array, kernels: Kernels, *, params: HashParams, xp: Any) -> None:
        self.xp, self.flat, self.kernels, self.params = xp, flat, kernels, params
        self.kind = "i32" if flat.dtype == np.int32 else "i64"
        weighed = xp.empty(flat.shape[0], dtype=xp.uint64)
        kernels.launch(
            f"hpa_weigh_{self.kind}",
            flat.shape[0],
            flat,
            np.int64(flat.shape[0]),
            np.uint64(params.base_inverse),
            weighed,
        )
        self.running = xp.cumsum(weighed) if weighed.shape[0] else weighed  # wraps mod 2^64
        self.hash = (np.uint64(params.base), np.uint64(KEY_SPREAD), np.uint64(params.key_mask))

    def bind(self, rows: ViewRows) -> None:
        self.rows = rows
        self.seeds = namespace_seeds(rows.ns, xp=self.xp)

    def element_keys(self, lo: int, hi: int) -> tuple[Array, Array]:
        xp, rows, count = self.xp, self.rows, hi - lo
        keys = xp.empty(count, dtype=xp.uint64)
        row = xp.empty(count, dtype=xp.int64)
        self.kernels.launch(
            "hpa_element_keys",
            count,
            self.running,
            rows.starts,
            self.seeds,
            rows.elem_off,
            np.int64(rows.m),
            np.int64(lo),
            np.int64(count),
            *self.hash,
            keys,
            row,
        )
        return keys, row

    def keys_at(self, asked: Array, depths: Array) -> Array:
        xp, count = self.xp, int(asked.shape[0])
        keys = xp.empty(count, dtype=xp.uint64)
        asked, depths = xp.astype(asked, xp.int64), xp.astype(depths, xp.int64)
        self.kernels.launch(
            "hpa_keys_at",
            count,
            self.running,
            self.rows.starts,
            self.seeds,
            asked,
            depths,
            np.int64(count),
            *self.hash,
            keys,
        )
        return keys

    def count_heads(self, sorted_keys: Array, sorted_rows: Array) -> Array:
        heads = self.xp.zeros(self.rows.m, dtype=self.xp.int64)
        count = int(sorted_keys.shape[0])
        self.kernels.launch(
            "hpa_count_heads", count, sorted_keys, sorted_rows, np.int64(count), heads
        )
        return heads

    def mismatched(self, e_hat: Array, w_row: Array, l_hat: Array, p_row: Array) -> Array:
        xp, rows = self.xp, self.rows
        bad = xp.zeros(rows.m, dtype=xp.uint8)
        self.kernels.launch(
            f"hpa_verify_{self.kind}",
            rows.units,
            self.flat,
            rows.starts,
            rows.elem_off,
            np.int64(rows.m),
            np.int64(rows.units),
            *(xp.astype(a, xp.int64) for a in (e_hat, w_row, l_hat, p_row)),
            bad,
        )
        return bad != 0


def check_layout(meta: RequestMeta, flat: np.ndarray, starts: np.ndarray) -> None:
    """Every request's units lie inside `flat` (the kernels index it unchecked)."""
    if flat.dtype not in (np.int32, np.int64):
        raise ValueError(f"units must be int32 or int64, not {flat.dtype}")
    starts = np.asarray(starts, dtype=np.int64)
    lens = np.asarray(meta.insert_len, dtype=np.int64)
    if starts.shape[0] != meta.n:
        raise ValueError(f"{starts.shape[0]} starts for {meta.n} requests")
    if meta.n and (
        starts.min() < 0 or int((starts + lens).max()) > flat.shape[0] or lens.min() < 0
    ):
        raise ValueError("a request's units lie outside the array of units")


def passes_for(units: int, free_bytes: int, unit_bytes: int) -> int:
    """The fewest key ranges (a power of two) whose sorts fit DEVICE_USE of free memory,
    beside the units themselves."""
    budget = DEVICE_USE * free_bytes - units * unit_bytes
    need = units * DEVICE_BYTES_PER_UNIT
    passes = 1
    while budget > 0 and need / passes > budget and passes < 1 << 16:
        passes *= 2
    if budget <= 0:
        raise MemoryError(
            f"{units:,} units do not fit the device's {free_bytes / 2**30:.1f} GiB free"
        )
    return passes


@dataclass(frozen=True)
class Device:
    """What the fused steps need of a device: its kernels, its free memory (bytes) now,
    and the copy of host ids onto it."""

    kernels: Kernels
    free_bytes: Callable[[], int]
    to_device: Callable[[np.ndarray], Array]


def cuda_device(cupy: Any) -> Device:
    return Device(CudaKernels(cupy), lambda: cupy.cuda.Device().mem_info[0], cupy.asarray)


def match_held(
    meta: RequestMeta,
    flat: np.ndarray,
    starts: np.ndarray,
    *,
    xp: Any,
    options: Any,
    device: Device | None = None,
) -> dict[str, SortAnswers]:
    """The sort matcher over sequences held on the host: on CuPy the fused kernels (the
    ids copied once; `device` defaults to the current CUDA device), elsewhere the plain
    steps."""
    check_layout(meta, flat, starts)
    params: HashParams = options.hash_params
    if backend_name(xp) != "cupy":
        passes = options.sort_passes or 1
        return sort_match(meta, flat, starts, xp=xp, params=params, passes=passes)
    device = device or cuda_device(xp._cp)
    passes = options.sort_passes or passes_for(
        int(meta.insert_len.sum()), device.free_bytes(), flat.dtype.itemsize
    )
    steps = FusedSteps(device.to_device(flat), device.kernels, params=params, xp=xp)
    return sort_match(meta, flat, starts, xp=xp, params=params, steps=steps, passes=passes)
