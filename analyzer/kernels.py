"""Every compiled kernel, loaded from numba's cache or compiled into it, once.

numba compiles a kernel at its first call for the argument types of that call, then keeps
the machine code in the `__pycache__` folder beside the module (content-hashed source, the
CPU, numba's version). The wheel's build runs this module (`setup.py`), so the installed
package carries the code of every kernel a command calls, for the types the callers pass:
an installed `hpa` never compiles on the machine that built it. `make install` runs it
after an editable install. A different CPU, another numba or a read-only package folder
(numba then caches under the user's cache folder) compiles once, at the first call.

    python -m analyzer.kernels        # load or compile all of them; one line each

Each entry calls the public code path a command takes, on a tiny input, so its argument
types (dtypes, read-only flags, tuples) are exactly the callers'.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np


def _token_scan() -> None:
    from analyzer.traces import token_scan

    token_scan.warm()


def _matcher() -> None:
    from analyzer.prefixes import radix

    for dtype in (np.int32, np.int64):  # token ids, block hash ids (as stored)
        radix.warm(np.dtype(dtype))


def _requests():
    from analyzer.sim.records import SimRequest

    shared = np.arange(1200, dtype=np.int32)  # a few blocks of a Mamba model's 544 tokens
    prompts = (shared, np.concatenate([shared, shared[:600]]), shared[:700])
    return [
        SimRequest(f"r{i}", prompt_token_ids=p, output_tokens=3, timestamp_s=float(i))
        for i, p in enumerate(prompts)
    ]


def _vllm(*overrides: str) -> Callable[[], None]:
    def run() -> None:
        from analyzer.config.policy import build_policy, policy_values
        from analyzer.sim import vllm

        values = policy_values("vllm-default", list(overrides))
        list(vllm.replay(_requests(), build_policy(values)))

    return run


def _capacity_curve() -> None:
    from analyzer.sim.stack_distance import capacity_curve

    capacity_curve(_requests(), 16)


# label -> the call that loads it; `hpa replay` reaches the three vLLM loops by its policy
KERNELS: dict[str, Callable[[], None]] = {
    "ingest: token arrays": _token_scan,
    "match: radix tree": _matcher,
    "replay: full attention, bounded": _vllm(
        "groups=full_attention", "block_size=16", "num_blocks=64"
    ),
    "replay: hybrid, bounded": _vllm("model=qwen3-next-80b-a3b", "num_blocks=64"),
    "replay: hybrid, EAGLE lookahead": _vllm(
        "model=qwen3-next-80b-a3b", "num_blocks=64", "spec_decode=eagle_lookahead"
    ),
    "plan: capacity curve": _capacity_curve,
}


def load_all(report: Callable[[str], None] | None = None) -> float:
    """Load (or compile and cache) every kernel; the seconds it took. `report` gets one
    line per kernel."""
    began = time.perf_counter()
    for label, load in KERNELS.items():
        start = time.perf_counter()
        load()
        if report is not None:
            report(f"{label}: {time.perf_counter() - start:.2f} s")
    return time.perf_counter() - began


def main() -> None:
    total_s = load_all(print)
    print(f"kernels: {len(KERNELS)} loaded in {total_s:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
