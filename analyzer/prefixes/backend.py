"""Array backends: the `xp` namespace the prefix matcher computes with (NumPy or CuPy).

NumPy is always available. CuPy is imported only inside `get_xp`, never at module level,
so a machine without it never pays for (or fails on) the import. Array code elsewhere
takes a keyword-only `xp` and uses only names of the Python array API standard; the small
`_CuPyNamespace` adapter below maps the few standard names CuPy spells differently.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from analyzer.errors import BackendUnavailable, ConfigError

BACKENDS = ("auto", "numpy", "cupy")

# Per card, as CUDA names it (`cudaDeviceProp.name`): the fewest units of a match from
# which the sort matcher on that GPU beats the radix tree on the CPU beside it
# (`make bench-gpu`'s `crossover`, warm; CUDA starts while DuckDB reads the ids;
# docs/benchmarks.md). `auto` takes a GPU only where its card is measured here and the
# match is that large; no card is measured yet (the one GPU run so far, before the sort
# matcher, lost to the CPU).
GPU_WINS_FROM_UNITS: Mapping[str, int] = MappingProxyType({})


def get_xp(
    name: str = "auto",
    *,
    units: int | None = None,
    measured: Mapping[str, int] = GPU_WINS_FROM_UNITS,
) -> Any:
    """The array namespace for backend `name`; `units` is the size of the match to run.

    `auto` takes CuPy where this machine's card is in `measured` and the match has at
    least its units, else NumPy: on the CPU the matcher streams the ids through compiled
    radix trees, which beat the first GPU matcher on an H200 (28 M tokens: 0.73 s
    against 2.82 s warm, 9.4 s on a first run; docs/benchmarks.md). `cupy` demands CuPy.

    Raises:
        ConfigError: `name` is not one of `BACKENDS`.
        BackendUnavailable: `cupy` was demanded but cannot be used here.
    """
    if name not in BACKENDS:
        raise ConfigError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "cupy":
        return _cupy_namespace()
    if name == "auto" and units is not None and measured:
        wins_from = measured.get(_card_name() or "")
        if wins_from is not None and units >= wins_from:
            try:
                return _cupy_namespace()
            except BackendUnavailable:
                return np
    return np


def _card_name() -> str | None:
    """This machine's first CUDA card's name, or None without CuPy or a card; CuPy is
    imported only where it is installed (a probe never fails a match)."""
    if importlib.util.find_spec("cupy") is None:
        return None
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    except Exception:  # a broken CUDA install: the CPU answers
        return None
    return name.decode() if isinstance(name, bytes) else str(name)


def backend_name(xp: Any) -> str:
    """A short name for `xp` as printed in summaries: numpy, cupy or the module name."""
    if xp is np:
        return "numpy"
    if isinstance(xp, _CuPyNamespace):
        return "cupy"
    return getattr(xp, "__name__", type(xp).__name__)


def to_numpy(x: Any) -> np.ndarray:
    """Copy (or view) an array of any supported backend as a NumPy array on the host."""
    if isinstance(x, np.ndarray):
        return x
    if type(x).__module__.split(".")[0] == "cupy":  # class-name test: never imports CuPy
        return x.get()
    try:
        return np.from_dlpack(x)
    except (TypeError, RuntimeError, AttributeError, BufferError):
        return np.asarray(x)


class _Unavailable(BackendUnavailable):
    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"CuPy requested but not usable: {reason}; "
            "install hybrid-prefix-analyzer[gpu] or use --backend numpy"
        )


def _cupy_namespace() -> _CuPyNamespace:
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        raise _Unavailable(f"cannot import cupy ({type(exc).__name__}: {exc})") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        raise _Unavailable(f"no CUDA device ({type(exc).__name__}: {exc})") from None
    if count < 1:
        raise _Unavailable("no CUDA device found")
    return _CuPyNamespace(cupy)


class _CuPyNamespace:
    """CuPy under the array-API names the matcher uses; everything else falls through."""

    def __init__(self, cupy: Any) -> None:
        self._cp = cupy
        self.__name__ = "cupy"
        self.bool = cupy.bool_

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cp, name)

    def full(self, shape: Any, fill_value: Any, *, dtype: Any = None) -> Any:
        if dtype is not None and isinstance(fill_value, int):  # e.g. uint64 values >= 2^63
            fill_value = np.asarray(fill_value, dtype=dtype)[()]
        return self._cp.full(shape, fill_value, dtype=dtype)

    def astype(self, x: Any, dtype: Any, /, *, copy: bool = True) -> Any:
        return x.astype(dtype, copy=copy)

    def concat(self, arrays: Any, /, *, axis: int = 0) -> Any:
        return self._cp.concatenate(list(arrays), axis=axis)

    def cumulative_sum(self, x: Any, /, *, dtype: Any = None, include_initial: bool = False) -> Any:
        out = self._cp.cumsum(x, dtype=dtype)
        if include_initial:
            out = self._cp.concatenate([self._cp.zeros(1, dtype=out.dtype), out])
        return out

    def cumulative_prod(
        self, x: Any, /, *, dtype: Any = None, include_initial: bool = False
    ) -> Any:
        out = self._cp.cumprod(x, dtype=dtype)
        if include_initial:
            out = self._cp.concatenate([self._cp.ones(1, dtype=out.dtype), out])
        return out

    def argsort(self, x: Any, /, *, axis: int = -1, stable: bool = True) -> Any:
        return self._cp.argsort(x, axis=axis)  # CuPy's sort is always stable

    def sort(self, x: Any, /, *, axis: int = -1, stable: bool = True) -> Any:
        return self._cp.sort(x, axis=axis)

    def repeat(self, x: Any, repeats: Any, /) -> Any:
        # cupy.repeat wants host-side repeat counts; a device array goes through searchsorted.
        if isinstance(repeats, int):
            return self._cp.repeat(x, repeats)
        bounds = self._cp.cumsum(repeats)
        total = int(bounds[-1]) if bounds.size else 0
        idx = self._cp.searchsorted(bounds, self._cp.arange(total), side="right")
        return self._cp.take(x, idx)
