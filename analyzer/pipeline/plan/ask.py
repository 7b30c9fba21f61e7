"""What the user asked of a plan: the CLI's options, checked once."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from analyzer.config.memory import parse_size
from analyzer.config.routers import ROUTERS, router
from analyzer.errors import ConfigError
from analyzer.metrics.compare import parse_window
from analyzer.store.runs import check_measure_from


@dataclass(frozen=True)
class PlanAsk:
    """What the user asked of a plan (the CLI's options, checked)."""

    target: float  # useful hit ratio, in (0, 1]
    model: str | None = None
    memory_budget: str | None = None  # per cache, as written (40GiB)
    family: str | None = None
    schedule: str | None = None
    time_scale: float | None = None
    policy: dict[str, Any] | None = None  # --policy / --set keys every replay starts from
    measure_from: float = 0.0
    ttft_p99_s: float | None = None
    gpu: str | None = None  # a name of config.hardware.GPUS
    gpu_memory_gib: float | None = None  # any other accelerator's memory
    tensor_parallel: int | None = None  # GPUs per replica (None: the fewest that fit)
    tpot_p99_s: float | None = None
    routers: tuple[str, ...] | None = None  # searched under a latency target (None: ROUTERS)
    max_replicas: int | None = None  # the most replicas a latency search tries
    window: str | None = None  # START..END: measure the requests of this time window only
    # per cache, as written (64GiB): a host KV tier; a latency plan's caches are its replicas
    host_memory_budget: str | None = None

    @property
    def latency(self) -> bool:
        """Whether a latency target is asked (the plan then searches fleets)."""
        return self.ttft_p99_s is not None or self.tpot_p99_s is not None

    @property
    def in_gpus(self) -> bool:
        """Whether the answer is asked in GPUs."""
        return self.gpu is not None or self.gpu_memory_gib is not None

    def check(self) -> None:
        check_measure_from(self.measure_from)
        if self.window is not None:
            parse_window(self.window)  # a bad window, before the trace is read
        for flag, size, without in (
            ("--memory-budget", self.memory_budget, "a pool limit"),
            ("--host-memory-budget", self.host_memory_budget, "a host tier"),
        ):  # a size without a unit, or none at all, before any replay
            if size is not None and parse_size(size, flag) <= 0:
                raise ConfigError(
                    f"{flag} {size}: expected a size above 0 (leave the option out to plan "
                    f"without {without})"
                )
        if not 0.0 < self.target <= 1.0:
            raise ConfigError(
                f"--target-useful-hit-ratio {self.target}: expected a number in (0, 1]"
            )
        for flag, value in (("--ttft-p99", self.ttft_p99_s), ("--tpot-p99", self.tpot_p99_s)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{flag} {value}: expected a number of seconds > 0")
        top = self.max_replicas
        if top is not None and (type(top) is not int or top < 1):
            raise ConfigError(f"--max-replicas {top!r}: expected an integer >= 1")
        if self.routers is not None:
            if not self.latency:
                raise ConfigError("--routers needs --ttft-p99 or --tpot-p99")
            for name in self.routers:
                if name not in ROUTERS:
                    raise ConfigError(
                        f"--routers {name!r}: no such router; known: "
                        + ", ".join(n for n in ROUTERS if n != "trace")
                    )
                if router(name).name == "trace":
                    raise ConfigError(
                        "--routers trace: the trace's own replicas are not a fleet to size; "
                        "searched routers: " + ", ".join(n for n in ROUTERS if n != "trace")
                    )
        tp = self.tensor_parallel
        if tp is not None and not self.in_gpus:
            raise ConfigError("--tensor-parallel needs --gpu or --gpu-memory-gib")
        if tp is not None and (type(tp) is not int or tp < 1):
            raise ConfigError(f"--tensor-parallel {tp!r}: expected an integer >= 1")
