"""Shared pieces of the benchmarks: a cached generated trace and child-process timing."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).parent / "data"

# Runs in a fresh interpreter so peak RSS belongs to one contender only.
_CHILD = """
import json, resource, sys, time
setup, body = sys.argv[1], sys.argv[2]
scope = {}
exec(setup, scope)
start = time.perf_counter()
exec(body, scope)
elapsed = time.perf_counter() - start
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": elapsed, "peak_mib": peak_kib / 1024,
                  "result": scope.get("result")}))
"""


# Linux counts a process's peak RSS from its parent's RSS at the fork (the high-water mark
# survives fork and exec), so a contender spawned by a benchmark that holds a trace would be
# charged the benchmark's memory. Contenders start from this small launcher instead: it runs
# the command (stdout and stderr passed through), waits for it, and writes the command's own
# wall seconds, CPU seconds, peak RSS (wait4) and exit status to the file named first.
_LAUNCH = """
import json, os, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
figures = {"wall_s": time.perf_counter() - start, "cpu_s": usage.ru_utime + usage.ru_stime,
           "peak_mib": usage.ru_maxrss / 1024, "rc": os.waitstatus_to_exitcode(status)}
with open(sys.argv[1], "w") as f:
    json.dump(figures, f)
"""


def run_measured(cmd: list[str], **kwargs) -> dict:
    """`cmd` as a whole process through the launcher above: its stdout and stderr (text),
    exit status, wall and CPU seconds and its own peak RSS in MiB. `kwargs` go to
    subprocess.run (cwd, env)."""
    with tempfile.TemporaryDirectory(prefix="hpa-bench-") as tmp:
        result = Path(tmp) / "figures.json"
        out = subprocess.run(
            [sys.executable, "-c", _LAUNCH, str(result), *cmd],
            capture_output=True,
            text=True,
            **kwargs,
        )
        figures = json.loads(result.read_text())
    return {**figures, "stdout": out.stdout, "stderr": out.stderr}


def compile_bytecode() -> None:
    """Compile the package's bytecode, as installing a wheel does. This checkout is an
    editable install, and where PYTHONDONTWRITEBYTECODE is set (as on our CI machines) each
    `hpa` process would otherwise compile every module it imports from source (0.17 s of a
    replay's start), which a user's installed hpa never does."""
    package = Path(__file__).resolve().parents[1] / "analyzer"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True)


def measure(setup: str, body: str) -> dict:
    """Seconds of `body` (after `setup`) and the peak RSS of its own process, in MiB (started
    from the launcher: the caller may hold a trace)."""
    done = run_measured([sys.executable, "-c", _CHILD, setup, body])
    if done["rc"]:
        raise SystemExit(f"benchmark child failed: {done['stderr'].strip()[-500:]}")
    return json.loads(done["stdout"].strip().splitlines()[-1])


def mixed_trace(min_tokens: int, *, seed: int = 7) -> tuple[Path, int, int]:
    """A `mixed` synthetic JSONL trace of at least `min_tokens` prompt tokens (cached).

    Returns (path, number of requests, prompt tokens).
    """
    from analyzer.traces.synth import generate, write_jsonl

    DATA.mkdir(exist_ok=True)
    path = DATA / f"mixed_{min_tokens}_{seed}.jsonl"
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists():
        info = json.loads(meta.read_text())
        return path, info["num_requests"], info["prompt_tokens"]
    counts = {"num_requests": 0, "prompt_tokens": 0}

    def until_enough():
        for record in generate("mixed", seed=seed, num_requests=10**9):
            yield record
            counts["num_requests"] += 1
            counts["prompt_tokens"] += len(record["prompt_token_ids"])
            if counts["prompt_tokens"] >= min_tokens:
                return

    started = time.perf_counter()
    write_jsonl(until_enough(), path)
    print(
        f"generated {path} ({counts['prompt_tokens']:,} prompt tokens, "
        f"{counts['num_requests']:,} requests) in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    meta.write_text(json.dumps(counts))
    return path, counts["num_requests"], counts["prompt_tokens"]


def small_trace(num_requests: int, *, seed: int = 7) -> Path:
    """The first `num_requests` requests of the `mixed` synthetic trace (cached): a command's
    base, its figures at almost no data."""
    from analyzer.traces.synth import generate, write_jsonl

    DATA.mkdir(exist_ok=True)
    path = DATA / f"mixed_first_{num_requests}_{seed}.jsonl"
    if not path.exists():
        write_jsonl(generate("mixed", seed=seed, num_requests=num_requests), path)
    return path
