"""Every compiled kernel, loaded from numba's cache or compiled into it, once.

Two loops are C extensions instead, built with the package (setup.py; `NATIVE`): the
token-array scanner and the radix trees, which `hpa ingest`, `hpa match` and the unbounded
replays run without importing numba. The rest (the vLLM replay loops, the capacity curve)
are numba kernels: numba compiles a kernel at its first call for the argument types of that
call, then keeps the machine code in the `__pycache__` folder beside the module
(content-hashed source, the CPU, numba's version). The wheel's build runs this module
(`setup.py`), so the installed package carries the code of every kernel a command calls, for
the types the callers pass: an installed `hpa` never compiles on the machine that built it.
`make install` runs it after an editable install. A different CPU, another numba or a
read-only package folder (numba then caches under the user's cache folder) compiles once, at
the first call.

    python -m analyzer.kernels        # the C loops built?, then load or compile each kernel

Each entry calls the public code path a command takes, on a tiny input, so its argument
types (dtypes, read-only flags, tuples) are exactly the callers'.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable

import numpy as np


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
    from analyzer.sim.vllm.compiled.stack_distance import capacity_curve

    capacity_curve(_requests(), 16)


# label -> the call that loads it; `hpa replay` reaches the three vLLM loops by its policy
KERNELS: dict[str, Callable[[], None]] = {
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


# label -> the C extension built with the package (setup.py): nothing to load or compile
NATIVE = {
    "ingest: token arrays": "analyzer.traces.token_scan_loop",
    "match and unbounded replays: radix trees": "analyzer.prefixes.radix_loop",
}


def native_missing() -> list[str]:
    """The C extensions that are not built (a package built without a C compiler)."""
    return [name for name in NATIVE.values() if importlib.util.find_spec(name) is None]


def main() -> None:
    missing = native_missing()
    for label, name in NATIVE.items():
        print(f"{label}: C ({'not built: the NumPy path' if name in missing else 'built'})")
    total_s = load_all(print)
    print(f"kernels: {len(KERNELS)} loaded in {total_s:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
