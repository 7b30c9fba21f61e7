"""Where independent partitions run: in this process, on local cores, or on a Ray cluster.

    spec = ExecutorSpec("ray", ray_address="auto")
    results = map_partitions(spec, fn, items, labels=names, shared=trace, progress=update)

`fn(shared, item)` must be a module-level function (it is pickled for the workers) and
must not depend on which worker runs it: the partitions are chosen by the callers so that
every one is independent (see `analyzer.access.sharded` and `analyzer.pipeline.replay`), and
results come back in input order whatever order they finish in. That is what makes every
executor give byte-identical tables. `shared` is one large read-only object every call
sees (a loaded trace): inherited by forked processes, put once in Ray's object store.

A failing partition is one line naming it (its label) and the cause: bad input met by a
worker keeps its error class (ConfigError, StoreError, ...); anything else is `WorkerError`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from analyzer.errors import AnalyzerError, BackendUnavailable, ConfigError

EXECUTORS = ("local", "processes", "ray")
# The sharded matcher's key: each request's first K tokens (analyzer.prefixes.shallow).
DEFAULT_SHARD_TOKENS = 256

Progress = Callable[[int, int], None]


class WorkerError(AnalyzerError):
    """A partition failed in a worker (its label and the cause are in the message)."""


@dataclass(frozen=True)
class ExecutorSpec:
    """How to run partitions. `workers`: processes to start (default: the local cores);
    for Ray, the CPUs of a local cluster started here (ignored with `ray_address`).
    `shard_tokens`: K, the sharded matcher's key length in tokens (each request's first K
    tokens; hash-id requests: ceil(K / block size) blocks); never changes a result."""

    name: str = "local"
    workers: int | None = None
    ray_address: str | None = None
    shard_tokens: int = DEFAULT_SHARD_TOKENS

    def __post_init__(self) -> None:
        if self.name not in EXECUTORS:
            raise ConfigError(
                f"--executor {self.name!r}: unknown executor; known: {', '.join(EXECUTORS)}"
            )
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"--workers {self.workers}: expected an integer >= 1")
        k = self.shard_tokens
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"--shard-tokens {k!r}: expected an integer >= 1")
        if self.ray_address is not None and self.name != "ray":
            raise ConfigError("--ray-address needs --executor ray")

    @property
    def is_local(self) -> bool:
        return self.name == "local"

    def num_workers(self) -> int:
        """How many partitions can run at once (used to size partitions)."""
        if self.name == "local":
            return 1
        if self.name == "processes":
            return self.workers or os.cpu_count() or 1
        ray = _ray()
        _ray_init(self, ray)
        return max(1, int(ray.cluster_resources().get("CPU", 1)))


LOCAL = ExecutorSpec()


def as_spec(executor: ExecutorSpec | str | None, **kwargs: Any) -> ExecutorSpec:
    """An ExecutorSpec from a spec, a name (with `workers`/`ray_address`) or None (local)."""
    if isinstance(executor, ExecutorSpec):
        return executor
    return ExecutorSpec(executor or "local", **kwargs)


def map_partitions(
    spec: ExecutorSpec,
    fn: Callable[[Any, Any], Any],
    items: Sequence[Any],
    *,
    labels: Sequence[str] | None = None,
    shared: Any = None,
    progress: Progress | None = None,
    in_worker: bool = False,
    weights: Sequence[int] | None = None,
    prepare: Callable[[], object] | None = None,
) -> list[Any]:
    """[fn(shared, item) for item in items], run by `spec`, in input order.

    `progress(done, total)` is called as each partition finishes: partitions, or the sum of
    the finished items' `weights` (e.g. their requests) out of all of them.
    `in_worker`: with `processes`, run even a lone partition (or `workers=1`) in a worker
    process, not in this one: for partitions that read what the driver must not hold (a
    dataset's whole trace). `local` always runs here.
    `prepare()` runs here once before any worker starts (never with `local`): what every
    worker would otherwise do for itself, such as compiling the kernels.

    Raises:
        AnalyzerError: a partition met bad input (same class, the partition named).
        WorkerError: a partition raised anything else or its worker died (named).
        BackendUnavailable: `ray` is not installed.
    """
    labels = list(labels) if labels is not None else [f"partition {i}" for i in range(len(items))]
    if len(labels) != len(items):
        raise ValueError("map_partitions: one label per item")
    if not items:
        return []
    progress = _ticker(progress, weights or [1] * len(items))
    if spec.name == "local" or (
        spec.name == "processes" and not in_worker and min(spec.num_workers(), len(items)) == 1
    ):
        return _run_local(fn, items, labels, shared, progress)
    if prepare is not None:
        prepare()
    if spec.name == "processes":
        return _run_processes(spec, fn, items, labels, shared, progress)
    return _run_ray(spec, fn, items, labels, shared, progress)


def _ticker(progress: Progress | None, weights: Sequence[int]) -> Callable[[int], None] | None:
    """tick(i): item i finished; calls `progress(weight done, total weight)`."""
    if progress is None:
        return None
    total, done = sum(weights), [0]

    def tick(i: int) -> None:
        done[0] += weights[i]
        progress(done[0], total)

    return tick


def _failed(label: str, exc: BaseException) -> AnalyzerError:
    """One line naming the partition. An AnalyzerError (bad input met by a worker) keeps
    its class and exit code; anything else (a bug, a dead worker) is a WorkerError."""
    text = str(exc).strip().splitlines()
    why = text[0] if text else ""
    if isinstance(exc, AnalyzerError):
        try:
            return type(exc)(f"{label}: {why}")
        except TypeError:
            pass
    name = type(exc).__name__
    return WorkerError(f"{label} failed: {name}: {why}" if why else f"{label} failed: {name}")


def _run_local(fn, items, labels, shared, progress) -> list:
    out = []
    for i, (item, label) in enumerate(zip(items, labels, strict=True)):
        try:
            out.append(fn(shared, item))
        except AnalyzerError as exc:  # a bug keeps its own traceback here
            raise _failed(label, exc) from exc
        if progress:
            progress(i)
    return out


# -- processes: a fork pool; `shared` is inherited, never pickled ---------------------------

_SHARED: Any = None
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _call_shared(fn, item):
    return fn(_SHARED, item)


def _die_with_driver(driver_pid: int) -> None:
    """Worker initializer: end this worker when the driver process dies, however it dies
    (`kill -9` included, which no pool shutdown sees; an orphaned worker would hang on its
    queue and hold the database open). Linux: the kernel sends SIGKILL (PR_SET_PDEATHSIG);
    elsewhere a thread watches the parent id. SIGTERM (the driver's way to stop a worker)
    ends it quietly: the driver's own handler, inherited by the fork, would speak for it."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)  # the driver's: a signal here is not the driver's to act on
    if not _kill_on_parent_death():
        threading.Thread(target=_watch_driver, args=(driver_pid,), daemon=True).start()
    if os.getppid() != driver_pid:  # the driver died before this worker was set up
        os._exit(1)


def _kill_on_parent_death() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_driver(driver_pid: int) -> None:
    while os.getppid() == driver_pid:
        time.sleep(0.5)
    os._exit(1)


def _run_processes(spec, fn, items, labels, shared, progress) -> list:
    # here, not at the top: a local run (every `hpa match`) never loads them (6 ms)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    global _SHARED
    _SHARED = shared
    ctx = multiprocessing.get_context("fork")
    workers = min(spec.num_workers(), len(items))
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_die_with_driver,
        initargs=(os.getpid(),),
    )
    try:
        results = _collect(pool, fn, items, labels, progress)
    except BaseException:
        # A failed partition, Ctrl-C or SIGTERM: stop now, not after the running ones.
        pool.shutdown(wait=False, cancel_futures=True)
        for child in multiprocessing.active_children():
            child.terminate()
        raise
    else:
        pool.shutdown()
    finally:
        _SHARED = None
    return results


def _collect(pool, fn, items, labels, progress) -> list:
    """Submit every item to `pool`; the results in input order (the first failure raises)."""
    from concurrent.futures import FIRST_COMPLETED, wait

    results: list = [None] * len(items)
    futures = {pool.submit(_call_shared, fn, item): i for i, item in enumerate(items)}
    pending = set(futures)
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        for future in sorted(done, key=futures.get):
            i = futures[future]
            try:
                results[i] = future.result()
            except Exception as exc:  # a worker's error or a dead worker
                i, exc = _first_failure(futures, pending, i, exc)
                raise _failed(labels[i], exc) from exc
            if progress:
                progress(i)
    return results


def _first_failure(futures: dict, pending: set, i: int, exc: Exception):
    """(index, error) of the first failing item in input order, whichever finished first:
    the earlier items still running are waited for, so the error is the same every run."""
    for future in sorted(pending, key=futures.get):
        j = futures[future]
        if j > i:
            future.cancel()
            continue
        try:
            future.result()
        except Exception as earlier:
            return j, earlier
    return i, exc


# -- ray: tasks on an existing cluster, or a local one started here ---------------------------


def _ray():
    try:
        import ray
    except ImportError:
        raise BackendUnavailable(
            "--executor ray: ray is not installed; pip install 'hybrid-prefix-analyzer[ray]'"
        ) from None
    return ray


def _ray_init(spec: ExecutorSpec, ray) -> None:
    if ray.is_initialized():
        return
    try:
        if spec.ray_address is not None:
            ray.init(address=spec.ray_address, log_to_driver=False, logging_level="error")
        else:
            ray.init(
                num_cpus=spec.workers,
                include_dashboard=False,
                log_to_driver=False,
                logging_level="error",
            )
    except Exception as exc:
        where = spec.ray_address or "a local cluster"
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BackendUnavailable(f"--executor ray: cannot start or reach {where}: {why}") from None


def _ray_call(fn, shared, item):
    return fn(shared, item)


def _run_ray(spec, fn, items, labels, shared, progress) -> list:
    ray = _ray()
    _ray_init(spec, ray)
    remote = ray.remote(num_cpus=1, max_retries=0)(_ray_call)
    shared_ref = ray.put(shared)
    refs = [remote.remote(fn, shared_ref, item) for item in items]
    index = {ref.hex(): i for i, ref in enumerate(refs)}
    results: list = [None] * len(items)
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                i = index[ref.hex()]
                try:
                    results[i] = ray.get(ref)
                except Exception as exc:
                    raise _failed(labels[i], _ray_cause(exc)) from None
                if progress:
                    progress(i)
    except BaseException:
        for ref in pending:
            with contextlib.suppress(Exception):  # best effort: report the first error
                ray.cancel(ref, force=True)
        raise
    return results


def _ray_cause(exc: BaseException) -> BaseException:
    """The worker's own exception inside Ray's wrapper, when there is one."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc
