"""What the user asked of a plan: the CLI's options, checked once."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from analyzer.errors import ConfigError
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

    @property
    def in_gpus(self) -> bool:
        """Whether the answer is asked in GPUs."""
        return self.gpu is not None or self.gpu_memory_gib is not None

    def check(self) -> None:
        check_measure_from(self.measure_from)
        if not 0.0 < self.target <= 1.0:
            raise ConfigError(
                f"--target-useful-hit-ratio {self.target}: expected a number in (0, 1]"
            )
        ttft = self.ttft_p99_s
        if ttft is not None and not (math.isfinite(ttft) and ttft > 0):
            raise ConfigError(f"--ttft-p99 {ttft}: expected a number of seconds > 0")
        tp = self.tensor_parallel
        if tp is not None and not self.in_gpus:
            raise ConfigError("--tensor-parallel needs --gpu or --gpu-memory-gib")
        if tp is not None and (type(tp) is not int or tp < 1):
            raise ConfigError(f"--tensor-parallel {tp!r}: expected an integer >= 1")
