"""Step time from NVIDIA AIConfigurator's measured kernel database, as tables (the `aic` step
model; issue 44 item 3).

AIConfigurator (`aiconfigurator-core`, Apache-2.0, offline) prices a forward pass from kernels
measured per GPU and engine version. Its compiled engine answers a query in 0.02-0.1 ms (0.5 s
for the first, which loads the kernel tables), too slow and too heavy to call per scheduler
step, so hpa asks it once per (model, GPU, tensor parallelism) for two tables and interpolates:

- **prefill**: ms of a prefill step of `new_tokens` new tokens whose request already has
  `prefix_tokens` computed (`EngineHandle.predict_prefill_latency(1, new + prefix, prefix)`:
  AIC's isl counts the prefix);
- **decode**: ms of a decode-only step of `batch` requests with `context_tokens` each
  (`EngineHandle.decode_step_latency(batch, context - 1, 1)`: AIC prices the step at
  s = isl + osl // 2 + 1 = context).

A step of the replay (`TableStep.step_s`) composes them as AIC's own mixed step does
(`Engine::mixed_step_latency`: one pass of the non-attention layers over the step's context
*and* decode tokens together, plus context attention, plus decode attention):

    prefill only:  prefill(N, P)
    decode only:   decode(B, C)
    both:          prefill(N + B, P) + max(0, decode(B, C) - decode(B, C_min))

with N the step's new prompt tokens (all chunks), P their token-weighted mean prefix, B the
decoding requests, C their mean context and C_min the table's smallest context. The decode
tokens ride through the weights with the prefill (one weight read, as in vLLM's mixed batch);
what they add of their own is the context-dependent part of a decode step (reading their KV),
taken from the decode table by difference, so it holds whatever AIC names that op (MLA's
fused block included). Summing prefill(N) + decode(B, C) instead would charge the weights
twice: 139 ms against AIC's 120 ms for 8,192 new tokens + 128 decodes at 8 k context
(Qwen3.5-35B-A3B, H200); this rule gives 121 ms.

Interpolation: piecewise-linear over each grid axis (bilinear over two), extrapolated linearly
from the outermost segment beyond the grid; a result below 0 is 0. All grids are precomputed
as tuples and searched with `bisect`: a step costs a few microseconds, no numpy.

Tables are cached on disk, `$XDG_CACHE_HOME/hpa/aic/<key>.json` (`~/.cache` by default), and
made in-process when the `aic` extra is installed (`tools/aic/tabulate.py` makes one from the
command line). aiconfigurator is imported only inside `tabulate`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
from bisect import bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analyzer.errors import ConfigError

# The version the `aic` extra pins; a cache key names the installed version when there is one.
AIC_VERSION = "0.12.0"
AIC_BACKEND = "vllm"
# hpa's GPU names (lower case) -> AIConfigurator's system (its per-GPU kernel database).
AIC_SYSTEMS = {
    "a100": "a100_sxm",
    "h100": "h100_sxm",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "b300": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
    "l40s": "l40s",
}
# The grids `tabulate` asks for (tokens; batch in requests).
PREFILL_NEW_TOKENS = (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
PREFILL_PREFIX_TOKENS = (0, 2048, 8192, 32768, 131072)
DECODE_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DECODE_CONTEXT = (128, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
MISSING_EXTRA = "step model 'aic' needs the aic extra: pip install 'hybrid-prefix-analyzer[aic]'"


def _segment(grid: tuple[float, ...], x: float) -> tuple[int, float]:
    """The grid segment for `x` (its left index) and x's position in it: in [0, 1] inside
    the grid, < 0 or > 1 outside (linear extrapolation); (0, 0.0) for a one-point grid."""
    last = len(grid) - 2
    if last < 0:
        return 0, 0.0
    i = min(max(bisect_right(grid, x) - 1, 0), last)
    left = grid[i]
    return i, (x - left) / (grid[i + 1] - left)


def _bilinear(
    rows: tuple[tuple[float, ...], ...], gx: tuple[float, ...], gy: tuple[float, ...], x, y
) -> float:
    """rows[i][j] at (gx[i], gy[j]), interpolated (or extrapolated) at (x, y)."""
    i, t = _segment(gx, x)
    j, u = _segment(gy, y)
    row = rows[i]
    j1 = j + 1 if len(gy) > 1 else j
    low = row[j] + u * (row[j1] - row[j])
    if len(gx) == 1:
        return low
    nxt = rows[i + 1]
    high = nxt[j] + u * (nxt[j1] - nxt[j])
    return low + t * (high - low)


def _axis(section: dict, name: str, where: str) -> tuple[float, ...]:
    values = section.get(name)
    if (
        not isinstance(values, list)
        or not values
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        or any(b <= a for a, b in zip(values, values[1:], strict=False))
    ):
        raise ConfigError(f"{where}: '{name}' must be a non-empty increasing list of numbers")
    return tuple(float(v) for v in values)


def _grid(table: dict, part: str, axes: tuple[str, str], where: str):
    """One table part as (x axis, y axis, rows), each checked."""
    section = table.get(part)
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: missing the '{part}' object")
    gx, gy = (_axis(section, axis, f"{where} {part}") for axis in axes)
    ms = section.get("ms")
    if not isinstance(ms, list) or len(ms) != len(gx):
        raise ConfigError(f"{where} {part}: 'ms' must have one row per {axes[0]} value")
    rows = []
    for row in ms:
        if not isinstance(row, list) or len(row) != len(gy):
            raise ConfigError(f"{where} {part}: each 'ms' row must have one value per {axes[1]}")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in row):
            raise ConfigError(f"{where} {part}: 'ms' values must be numbers >= 0")
        rows.append(tuple(float(v) for v in row))
    return gx, gy, tuple(rows)


class TableStep:
    """A step model over a measured table (see the module docstring for the rule):
    `step_s(prefill, decode_requests, decode_context_tokens)` in seconds, `prefill` the
    step's chunks as (new tokens, tokens computed before them)."""

    def __init__(self, table: dict[str, Any], where: str = "aic table") -> None:
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: expected a JSON object")
        self.table = table
        self.source = str(table.get("source", "?"))
        self.model = str(table.get("model", "?"))
        self.gpu = str(table.get("gpu", "?"))
        self.tensor_parallel = table.get("tensor_parallel")
        axes = ("new_tokens", "prefix_tokens")
        self._pn, self._pp, self._pms = _grid(table, "prefill", axes, where)
        self._db, self._dc, self._dms = _grid(table, "decode", ("batch", "context_tokens"), where)
        self._c_min = self._dc[0]

    def prefill_ms(self, new_tokens: float, prefix_tokens: float = 0.0) -> float:
        """A prefill step of `new_tokens` after `prefix_tokens` already computed, in ms."""
        return max(0.0, _bilinear(self._pms, self._pn, self._pp, new_tokens, prefix_tokens))

    def decode_ms(self, batch: float, context_tokens: float) -> float:
        """A decode-only step of `batch` requests of `context_tokens` each, in ms."""
        return max(0.0, _bilinear(self._dms, self._db, self._dc, batch, context_tokens))

    def step_s(
        self,
        prefill: Sequence[tuple[int, int]],
        decode_requests: int,
        decode_context_tokens: int,
    ) -> float:
        """One scheduler step, in seconds: prefill chunks (new, computed before) and
        `decode_requests` decoding requests whose contexts sum to `decode_context_tokens`."""
        new = 0
        weighted = 0
        for chunk_new, chunk_done in prefill:
            new += chunk_new
            weighted += chunk_new * chunk_done
        if decode_requests <= 0:
            return self.prefill_ms(new, weighted / new) * 1e-3 if new > 0 else 0.0
        context = decode_context_tokens / decode_requests
        decode = self.decode_ms(decode_requests, context)
        if new <= 0:
            return decode * 1e-3
        reads = max(0.0, decode - self.decode_ms(decode_requests, self._c_min))
        return (self.prefill_ms(new + decode_requests, weighted / new) + reads) * 1e-3

    def describe(self) -> str:
        """The step model in one line (printed beside every simulated time)."""
        return (
            f"measured table: {self.source}, {self.model} on {self.gpu} TP"
            f"{self.tensor_parallel} (prefill {self.prefill_ms(8192):.1f} ms per 8,192 tokens, "
            f"decode {self.decode_ms(32, 8192):.1f} ms at batch 32 x 8,192 tokens)"
        )


def load_table(path: str | Path) -> TableStep:
    """A TableStep from a table file (the layout `tabulate` writes); ConfigError when the
    file cannot be read or is not such a table."""
    path = Path(path)
    try:
        table = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"aic table {path}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ConfigError(f"aic table {path}: not JSON ({exc})") from None
    return TableStep(table, where=f"aic table {path}")


def aic_installed() -> bool:
    """Whether the `aic` extra (aiconfigurator-core) can be imported here."""
    return importlib.util.find_spec("aiconfigurator_core") is not None


def aic_version() -> str:
    """The installed aiconfigurator-core's version, or the pinned one when it is absent."""
    try:
        return importlib.metadata.version("aiconfigurator-core")
    except importlib.metadata.PackageNotFoundError:
        return AIC_VERSION


def aic_system(gpu: Any) -> str:
    """AIConfigurator's system for a GPU (an `analyzer.config.hardware.Gpu` or a name)."""
    name = str(getattr(gpu, "name", gpu))
    system = AIC_SYSTEMS.get(name.lower())
    if system is None:
        known = ", ".join(sorted(n.upper() for n in AIC_SYSTEMS))
        raise ConfigError(f"step model 'aic': AIConfigurator has no database for {name}: {known}")
    return system


def aic_model(model: str | None) -> tuple[str, str]:
    """(what AIConfigurator is given, a file-name-safe slug) for `--model`: a Hugging Face
    id AIConfigurator ships (`Qwen/Qwen3.5-35B-A3B`), or a path to a model's config.json (or
    its folder), slugged by its content. A preset name has no AIConfigurator model."""
    if not model:
        raise ConfigError("step model 'aic' needs a model: --model CONFIG_JSON")
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"model file {path}: cannot read ({exc.strerror or exc})") from None
        if b'"architectures"' not in text and b'"model_type"' not in text:
            raise ConfigError(
                f"step model 'aic': {path} is not a Hugging Face config.json "
                "(no 'architectures' or 'model_type'), which AIConfigurator needs"
            )
        digest = hashlib.sha256(text).hexdigest()[:12]
        name = path.parent.name if path.name == "config.json" else path.stem
        return str(path), f"{_slug(name)}-{digest}"
    if "/" in model:
        return model, _slug(model.replace("/", "--"))
    raise ConfigError(
        f"step model 'aic': model {model!r} is a preset, which AIConfigurator does not know; "
        "give --model the model's Hugging Face config.json (or an id AIConfigurator ships)"
    )


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "model"


def cache_dir() -> Path:
    """Where tables are cached: $XDG_CACHE_HOME/hpa/aic (~/.cache/hpa/aic by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hpa" / "aic"


def cache_path(model: str, gpu: Any, tensor_parallel: int) -> Path:
    """The cache file of (model, GPU, TP) under the installed (or pinned) AIC version."""
    _, slug = aic_model(model)
    key = f"{slug}__{aic_system(gpu)}__tp{int(tensor_parallel)}__aic{aic_version()}"
    return cache_dir() / f"{key}.json"


def tabulated(model: str, gpu: Any, tensor_parallel: int) -> TableStep:
    """The `aic` step model of (model, GPU, TP): its cached table, or (with the `aic` extra)
    a table made now in-process and cached (about 2 s); ConfigError without either."""
    path = cache_path(model, gpu, tensor_parallel)
    if path.exists():
        try:
            return load_table(path)
        except ConfigError:
            if not aic_installed():
                raise
    if not aic_installed():
        raise ConfigError(MISSING_EXTRA)
    source, _ = aic_model(model)
    gpu_name = str(getattr(gpu, "name", gpu))
    table = tabulate(source, aic_system(gpu), int(tensor_parallel), gpu_name=gpu_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a short name of its own: `KEY.PID.tmp` was past 255 bytes for a long model's KEY
    scratch = path.with_name(f".hpa-{os.getpid()}.tmp")
    try:
        scratch.write_text(json.dumps(table, indent=1) + "\n")
        os.replace(scratch, path)
    except BaseException:  # a full disk, Ctrl-C: no half-written file is left
        scratch.unlink(missing_ok=True)
        raise
    return TableStep(table, where=f"aic table {path}")


def compile_engine(model: str, system: str, tensor_parallel: int, version: str):
    """AIConfigurator's compiled engine for (model, system, TP) on its vLLM `version`
    database: `EngineHandle.compile(model, system, "vllm", backend_version=version,
    tp_size=TP, moe_tp_size=TP, moe_ep_size=1)` (vLLM's default: experts sharded by TP, no
    expert parallelism). `model`: a Hugging Face id AIC ships, or a config.json, which AIC
    reads from the folder holding it (from a scratch copy when the file has another name).
    Imports aiconfigurator here, never at module level."""
    import tempfile

    from aiconfigurator_core.sdk.engine import EngineHandle

    def compiled(source: str):
        return EngineHandle.compile(
            source,
            system,
            AIC_BACKEND,
            backend_version=version,
            tp_size=tensor_parallel,
            moe_tp_size=tensor_parallel,
            moe_ep_size=1,
        )

    path = Path(model)
    if path.suffix != ".json":
        return compiled(model)
    if path.name == "config.json":
        return compiled(str(path.parent.resolve()))
    with tempfile.TemporaryDirectory(prefix="hpa-aic-") as folder:
        (Path(folder) / "config.json").write_bytes(path.read_bytes())
        return compiled(folder)


def backend_version(system: str) -> str:
    """The vLLM version of AIC's current database for `system` (e.g. 0.24.0)."""
    from aiconfigurator_core.sdk.perf_database import resolve_query_version

    return str(resolve_query_version(system, AIC_BACKEND, "current"))


def tabulate(
    model: str,
    system: str,
    tensor_parallel: int,
    *,
    gpu_name: str | None = None,
    new_tokens: Sequence[int] = PREFILL_NEW_TOKENS,
    prefix_tokens: Sequence[int] = PREFILL_PREFIX_TOKENS,
    batch: Sequence[int] = DECODE_BATCH,
    context_tokens: Sequence[int] = DECODE_CONTEXT,
) -> dict[str, Any]:
    """Ask AIConfigurator for the prefill and decode tables of (model, system, TP); needs the
    `aic` extra. `model`: a Hugging Face id AIC ships or a path to a config.json."""
    aic_logger = logging.getLogger("aiconfigurator_core")
    level = aic_logger.level
    aic_logger.setLevel(logging.ERROR)  # its per-table "low-fidelity fallback" notices
    try:
        version = backend_version(system)
        engine = compile_engine(model, system, tensor_parallel, version)
        prefill = [
            [engine.predict_prefill_latency(1, n + p, p) for p in prefix_tokens] for n in new_tokens
        ]
        decode = [[engine.decode_step_latency(b, c - 1, 1) for c in context_tokens] for b in batch]
    except Exception as exc:  # any failure inside AIConfigurator is a model it cannot price
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"step model 'aic': AIConfigurator cannot price {model}: {first}"
        ) from None
    finally:
        aic_logger.setLevel(level)
    return {
        "source": f"aiconfigurator {aic_version()} {system} {AIC_BACKEND} {version}",
        "model": model,
        "gpu": gpu_name or system,
        "tensor_parallel": tensor_parallel,
        "calls": (
            "EngineHandle.compile(model, system, 'vllm', tp_size=TP, moe_tp_size=TP, "
            "moe_ep_size=1); prefill: predict_prefill_latency(1, new + prefix, prefix); "
            "decode: decode_step_latency(batch, context - 1, 1)"
        ),
        "prefill": {
            "new_tokens": list(new_tokens),
            "prefix_tokens": list(prefix_tokens),
            "ms": [[round(v, 4) for v in row] for row in prefill],
        },
        "decode": {
            "batch": list(batch),
            "context_tokens": list(context_tokens),
            "ms": [[round(v, 4) for v in row] for row in decode],
        },
    }
