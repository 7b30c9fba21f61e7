"""analyzer.kernels loads every kernel the commands call, with the argument types they pass:
after `load_all`, the README's commands in a new process add nothing to numba's cache (a call
with types the table misses would compile there, and write a new index). The wheel carries
what `load_all` compiles (setup.py), so a miss here is a first run that compiles. Kernels a
checkout compiled earlier hide a miss here; `.ci/wheel_tour.sh` checks from an empty cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from analyzer import kernels

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "mixed.jsonl.gz"


def _cache_files() -> dict[str, tuple[int, int]]:
    """numba's cache files of the package (in-tree, or under NUMBA_CACHE_DIR): size, mtime."""
    roots = [ROOT / "analyzer"]
    if os.environ.get("NUMBA_CACHE_DIR"):
        roots.append(Path(os.environ["NUMBA_CACHE_DIR"]))
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns)
        for root in roots
        for p in root.rglob("*.nb[ic]")
    }


def _hpa(*args: str, cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "analyzer", *args], cwd=cwd, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_every_kernel_loads_and_says_so():
    lines: list[str] = []
    total_s = kernels.load_all(lines.append)
    assert [line.rsplit(": ", 1)[0] for line in lines] == list(kernels.KERNELS)
    assert all(line.endswith(" s") for line in lines) and total_s > 0


def test_the_commands_compile_nothing_the_table_did_not(tmp_path):
    kernels.load_all()
    before = _cache_files()
    assert before, "no numba cache files: kernels.load_all cached nothing"
    db = str(tmp_path / "t.duckdb")
    _hpa("ingest", str(SAMPLE), "--db", db, cwd=tmp_path)
    _hpa("match", "--db", db, cwd=tmp_path)
    for settings in (
        ["model=qwen3-next-80b-a3b", "num_blocks=400"],
        ["groups=full_attention", "block_size=16", "num_blocks=4000"],
        ["model=qwen3-next-80b-a3b", "num_blocks=400", "schedule=concurrent", "time_scale=0.2"],
    ):
        sets = [arg for s in settings for arg in ("--set", s)]
        _hpa("replay", "--db", db, *sets, cwd=tmp_path)
    after = _cache_files()
    changed = sorted(p for p in after if after[p] != before.get(p))
    assert not changed, f"compiled at first use, missing from analyzer.kernels: {changed}"


# A process that runs ingest (a batch over SCAN_MIN_BYTES), match and an unbounded FA
# replay (over COMPILED_MIN_UNITS: streamed through the trees), counting the C loops' calls.
_C_LOOPS_ONLY = """
import sys
from analyzer.cli import cli
from analyzer.prefixes import radix
from analyzer.traces import token_scan
calls = {"radix": 0, "token_scan": 0}
def counted(name, loop):
    def call(*args):
        calls[name] += 1
        return loop(*args)
    return type(name, (), {"feed": staticmethod(call), "strip": staticmethod(call)})
radix.radix_loop = counted("radix", radix.radix_loop.feed)
token_scan.token_scan_loop = counted("token_scan", token_scan.token_scan_loop.strip)
for args in sys.argv[1:]:
    try:
        cli.main(args.split("|"), standalone_mode=False)
    except SystemExit as exc:
        assert not exc.code, args
print(calls["token_scan"] > 0, calls["radix"] > 0, "numba" in sys.modules)
"""


def test_ingest_match_and_an_unbounded_replay_run_c_loops_and_never_import_numba(tmp_path):
    """numba's import and a kernel's load cost a process 0.3-0.6 s and 115-160 MiB: the
    commands whose loops are C never pay them."""
    from analyzer.prefixes.radix import COMPILED_MIN_UNITS
    from analyzer.traces.readers import SCAN_MIN_BYTES

    trace = tmp_path / "t.jsonl"
    shared = list(range(3000))
    with trace.open("w") as out:
        for i in range(400):
            tokens = shared[: 1000 + 5 * i] + [7000 + i] * 2000
            out.write(f'{{"request_id": "r{i}", "prompt_token_ids": {tokens}}}\n')
    assert trace.stat().st_size > SCAN_MIN_BYTES and 400 * 3000 > COMPILED_MIN_UNITS
    db = tmp_path / "t.duckdb"
    steps = [
        f"ingest|{trace}|--db|{db}",
        f"match|--db|{db}",
        f"match|--db|{db}|--executor|processes|--workers|2",  # nothing to load before forking
        f"replay|--db|{db}|--policy|vllm-dense|--set|groups=full_attention|--set|block_size=16",
    ]
    done = subprocess.run(
        [sys.executable, "-c", _C_LOOPS_ONLY, *steps], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1].split() == ["True", "True", "False"], done.stdout
