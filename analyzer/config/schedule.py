"""The replay schedule (docs/definitions.md#the-concurrent-schedule): `serial`, or `concurrent` with
the keys of its simulated clock.

`serial` (the default) admits each request after the previous one finished: the no-contention
bound. `concurrent` runs every request through one vLLM 0.33 scheduler on a simulated clock;
its keys are the rows of `CONCURRENT_KEYS`. A concurrent key set to anything but its default
on a serial policy is an error rather than silently ignored; a serial policy leaves all of
them out of its canonical JSON, so its identity is what it was before schedules existed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from analyzer.errors import ConfigError

SCHEDULES = ("serial", "concurrent")
# `vllm serve`'s max_num_batched_tokens on a GPU of >= 70 GiB that is not an A100 (H100,
# H200, B200, MI300X): vLLM 0.33 `EngineArgs.get_batch_defaults` (vllm/engine/arg_utils.py)
# gives UsageContext.OPENAI_API_SERVER 8192 there (the LLM class 16384; other GPUs 2048 and
# 8192), and `_set_default_max_num_seqs_and_batched_tokens_args` applies it when the flag is
# not given; chunked prefill is always on in V1. The policy's default on every schedule, and
# the concurrent schedule's step budget when a policy sets the key to null.
VLLM_SERVE_MAX_NUM_BATCHED_TOKENS = 8192


@dataclass(frozen=True)
class ClockKey:
    """One key of the concurrent schedule. `kind`: int or number (int or float, stored as a
    float), the value >= `minimum` (> it when `exclusive`); or bool (true or false)."""

    kind: str
    default: int | float
    minimum: int | float
    maximum: int | float
    exclusive: bool = False

    def check(self, key: str, value: Any) -> int | float | bool:
        if self.kind == "bool":
            if type(value) is not bool:
                raise ConfigError(f"policy key {key!r}: expected true or false, got {value!r}")
            return value
        numeric = (int,) if self.kind == "int" else (int, float)
        ok = type(value) in numeric and _finite(value) and value <= self.maximum
        if not ok or (value <= self.minimum if self.exclusive else value < self.minimum):
            what = "an integer" if self.kind == "int" else "a number"
            bound = ">" if self.exclusive else ">="
            raise ConfigError(
                f"policy key {key!r}: expected {what} {bound} {self.minimum:g} and <= "
                f"{self.maximum:,}, got {value!r}"
            )
        return value if self.kind == "int" else float(value)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


# Maximums keep the simulated clock a finite, meaningful double: a step of at most 1,000 s
# (+ 1 s a token), arrival gaps stretched at most a million times.
CONCURRENT_KEYS: dict[str, ClockKey] = {
    "max_num_seqs": ClockKey("int", 256, 1, (1 << 31) - 1),
    "step_base_ms": ClockKey("number", 5.0, 0, 1e6),
    "step_token_us": ClockKey("number", 100.0, 0, 1e6),
    "time_scale": ClockKey("number", 1.0, 0, 1e6, exclusive=True),
    # vLLM 0.33 `vllm serve` schedules the next batch while the GPU runs the current one
    # (`AsyncScheduler`, two batches in flight): VllmConfig resolves async_scheduling=None to
    # true for generative models on one GPU's executor. false: the synchronous loop.
    "async_scheduling": ClockKey("bool", True, 0, 0),
}
SCHEDULE_KEYS = ("schedule", *CONCURRENT_KEYS)


def check_schedule(values: dict[str, Any]) -> dict[str, Any]:
    """The schedule keys of `values` (every one present) checked: a non-default concurrent
    key needs `schedule: concurrent`."""
    schedule = values["schedule"]
    if schedule not in SCHEDULES:
        raise ConfigError(
            f"policy key 'schedule': {schedule!r} is not one of {', '.join(SCHEDULES)}"
        )
    checked = {"schedule": schedule}
    for key, row in CONCURRENT_KEYS.items():
        checked[key] = row.check(key, values[key])
        if schedule != "concurrent" and checked[key] != row.default:
            raise ConfigError(
                f"policy key {key!r} needs schedule: concurrent (a {schedule} replay runs "
                "one request at a time, on no clock)"
            )
    return checked
