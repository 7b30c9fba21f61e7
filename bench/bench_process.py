"""Whole processes as a user times them, each figure beside the in-process one.

A user runs `hpa` once per question, so each command pays its interpreter's start, its
imports, opening the store and loading the compiled kernels; `make bench`'s other figures
time the library call alone. Here, on a generated `mixed` token-id trace:

- start-up: `python -c pass`, `hpa --version` and `hpa query "SELECT 1"` (imports and the
  store opened), the fixed cost of any command;
- per command (`hpa ingest`, `hpa match`, an FA-only replay as `bench-e2e`'s, a bounded
  hybrid replay): the whole process (seconds, peak RSS), the same command run in-process
  after a warm-up (the library's own time), the difference (start-up, imports, kernels
  loaded), and the peak RSS above the process's base (the same command on a 50-request
  trace), per prompt token;
- the peers as whole processes: DuckDB's `read_json` of the same file (against `hpa
  ingest`) and a plain Python dict-trie doing the matcher's job (`bench_match.py`'s, against
  `hpa match`; `--no-trie` skips it);
- the first run: ingest + match + bounded hybrid replay of `sample_traces/mixed.jsonl.gz`
  with numba's cache empty (every kernel compiled at first use, what an install without
  the compiled kernels costs), then as installed, then again.

Every whole-process figure is the median of `--runs` (3) fresh processes.

    .venv/bin/python bench/bench_process.py [--tokens 28e6] [--runs 3] [--no-trie]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_e2e import POLICY as FA_POLICY  # noqa: E402
from bench.bench_e2e import run_step  # noqa: E402
from bench.common import compile_bytecode, mixed_trace, small_trace  # noqa: E402

HPA = str(Path(sys.executable).with_name("hpa"))
SAMPLE = ROOT / "sample_traces" / "mixed.jsonl.gz"
HYBRID = ["--set", "model=qwen3-next-80b-a3b", "--set", "num_blocks=4000"]
COMMANDS = {  # name -> the arguments after `hpa`, {trace} and {db} filled in
    "hpa ingest": ["ingest", "{trace}", "--db", "{db}"],
    "hpa match": ["match", "--db", "{db}"],
    "hpa replay (FA only)": ["replay", "--db", "{db}", *FA_POLICY, "--measure-from", "0.5"],
    "hpa replay (hybrid, bounded)": ["replay", "--db", "{db}", *HYBRID],
}

# The command in-process: the CLI called after imports and a warm-up on the small trace
# (kernels loaded, store code imported), timed around the one call.
IN_PROCESS = r"""
import contextlib, io, json, sys, time
from analyzer.cli import cli
def call(args):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            cli.main(args, standalone_mode=False)
        except SystemExit as exc:
            if exc.code:
                raise
warm, timed = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for args in warm:
    call(args)
start = time.perf_counter()
call(timed)
print(json.dumps({"seconds": time.perf_counter() - start}))
"""
READ_JSON = (
    "import duckdb, sys; con = duckdb.connect(sys.argv[2]); con.execute('CREATE TABLE "
    "requests AS SELECT * FROM read_json(?, format=\\'newline_delimited\\')', [sys.argv[1]])"
)


def fill(args: list[str], trace: Path, db: Path) -> list[str]:
    return [a.format(trace=trace, db=db) for a in args]


def whole(cmd: list[str], runs: int, before=None) -> dict:
    """Median seconds and the largest peak RSS of `runs` fresh processes of `cmd`."""
    steps = []
    for _ in range(runs):
        if before is not None:
            before()
        steps.append(run_step(cmd))
    return {
        "seconds": median(s["seconds"] for s in steps),
        "spread": (min(s["seconds"] for s in steps), max(s["seconds"] for s in steps)),
        "peak_mib": max(s["peak_mib"] for s in steps),
    }


def in_process(name: str, trace: Path, db: Path, tmp: Path, small: Path) -> float:
    warm_db = tmp / f"warm-{len(name)}.duckdb"
    for suffix in ("", ".wal"):
        Path(f"{warm_db}{suffix}").unlink(missing_ok=True)
    warm = [fill(COMMANDS["hpa ingest"], small, warm_db)]
    if name != "hpa ingest":
        warm.append(fill(COMMANDS["hpa match"], small, warm_db))
        warm.append(fill(COMMANDS[name], small, warm_db))
    if name == "hpa ingest":  # into a new store: the file is in `db` already (stored once)
        db = tmp / "in-process.duckdb"
        fresh_db(db)()
    timed = fill(COMMANDS[name], trace, db)
    out = subprocess.run(
        [sys.executable, "-c", IN_PROCESS, json.dumps(warm), json.dumps(timed)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return json.loads(out.stdout.splitlines()[-1])["seconds"]


def fresh_db(db: Path):
    def drop() -> None:
        for suffix in ("", ".wal"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)

    return drop


def commands(trace: Path, small: Path, tmp: Path, runs: int) -> dict[str, dict]:
    """Every command whole and in-process, with its base (the small trace's peak)."""
    db, base_db = tmp / "bench.duckdb", tmp / "base.duckdb"
    rows = {}
    for name, args in COMMANDS.items():
        before = fresh_db(db) if name == "hpa ingest" else None
        row = whole([HPA, *fill(args, trace, db)], runs, before)
        base_before = fresh_db(base_db) if name == "hpa ingest" else None
        row["base_mib"] = whole([HPA, *fill(args, small, base_db)], 1, base_before)["peak_mib"]
        row["in_process_s"] = in_process(name, trace, db, tmp, small)
        rows[name] = row
    return rows


def peers(trace: Path, tmp: Path, runs: int, trie: bool) -> dict[str, dict]:
    duck = tmp / "read_json.duckdb"
    rows = {
        "duckdb read_json": whole(
            [sys.executable, "-c", READ_JSON, str(trace), str(duck)], runs, fresh_db(duck)
        )
    }
    if trie:
        out = tmp / "trie.json"
        child = [sys.executable, str(ROOT / "bench" / "bench_match.py"), "--child", "trie",
                 "--db", str(tmp / "bench.duckdb"), "--result", str(out)]  # fmt: skip
        rows["dict-trie (match)"] = whole(child, 1)
    return rows


def first_runs(tmp: Path) -> list[tuple[str, float]]:
    """ingest + match + bounded hybrid replay of the sample: cold, as installed, again."""
    db = tmp / "first.duckdb"
    steps = [
        COMMANDS["hpa ingest"],
        COMMANDS["hpa match"],
        COMMANDS["hpa replay (hybrid, bounded)"],
    ]
    hybrid_400 = ["--set", "model=qwen3-next-80b-a3b", "--set", "num_blocks=400"]
    steps[2] = ["replay", "--db", "{db}", *hybrid_400]
    out = []
    for label, cache in (("numba's cache empty", tmp / "numba-empty"), ("as installed", None),
                         ("second run", None)):  # fmt: skip
        env = dict(os.environ)
        env.pop("NUMBA_CACHE_DIR", None)
        if cache is not None:
            env["NUMBA_CACHE_DIR"] = str(cache)
        fresh_db(db)()
        seconds = [_timed(fill(s, SAMPLE, db), env) for s in steps]
        out.append((label, seconds))
    return out


def _timed(args: list[str], env: dict) -> float:
    probe = "import subprocess, sys, time; t = time.perf_counter(); "
    probe += "subprocess.run(sys.argv[1:], check=True, capture_output=True); "
    probe += "print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", probe, HPA, *args], env=env, check=True,
                         capture_output=True, text=True)  # fmt: skip
    return float(out.stdout)


def report(startup, rows, peer_rows, firsts, tokens: int) -> None:
    print(f"\n{'start-up (whole process)':<34}{'seconds':>9}{'peak MiB':>10}")
    for name, row in startup.items():
        print(f"{name:<34}{row['seconds']:>9.3f}{row['peak_mib']:>10.0f}")
    head = f"\n{'command':<34}{'whole s':>9}{'min-max':>12}{'in-proc s':>10}{'fixed s':>9}"
    print(head + f"{'peak MiB':>10}{'base MiB':>10}{'B/token':>9}")
    for name, row in {**rows, **peer_rows}.items():
        lo, hi = row["spread"]
        inner = row.get("in_process_s")
        fixed = None if inner is None else row["seconds"] - inner
        above = row["peak_mib"] - row.get("base_mib", 0)
        base = f"{row['base_mib']:.0f}" if "base_mib" in row else ""
        print(
            f"{name:<34}{row['seconds']:>9.2f}{f'{lo:.2f}-{hi:.2f}':>12}"
            f"{'' if inner is None else f'{inner:.2f}':>10}"
            f"{'' if fixed is None else f'{fixed:.2f}':>9}"
            f"{row['peak_mib']:>10.0f}"
            f"{base:>10}"
            f"{above * 2**20 / tokens:>9.1f}"
        )
    print("(fixed s: whole minus in-process, what a process pays before and after the work;")
    print(" B/token: peak RSS above the base, the same command on a 50-request trace; a peer's")
    print(" whole peak)")
    ingest, duck = rows["hpa ingest"]["seconds"], peer_rows["duckdb read_json"]["seconds"]
    print(f"hpa ingest vs duckdb read_json, whole processes: {duck / ingest:.2f}x (target >= 1)")
    if "dict-trie (match)" in peer_rows:
        trie, match = peer_rows["dict-trie (match)"]["seconds"], rows["hpa match"]["seconds"]
        print(f"hpa match vs a dict-trie, whole processes: {trie / match:.1f}x (target >= 50x)")
    print(f"\n{'first run: sample ingest + match + replay':<44}{'seconds':>30}{'total':>8}")
    for label, seconds in firsts:
        parts = " + ".join(f"{s:.2f}" for s in seconds)
        print(f"{label:<44}{parts:>30}{sum(seconds):>8.2f}")
    second = sum(firsts[-1][1])
    print(f"first run as installed / second run: {sum(firsts[1][1]) / second:.2f}x (target <= 2x);"
          f" with numba's cache empty: {sum(firsts[0][1]) / second:.1f}x")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=28e6, help="minimum prompt tokens")
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per figure")
    parser.add_argument("--no-trie", action="store_true", help="skip the dict-trie peer")
    args = parser.parse_args()
    trace, num_requests, tokens = mixed_trace(int(args.tokens))
    small = small_trace(50)
    print(f"trace: {trace.name}, {num_requests:,} requests, {tokens:,} prompt tokens, "
          f"{trace.stat().st_size / 2**20:,.0f} MiB; {args.runs} runs a figure, medians; "
          f"{os.cpu_count()} cores")  # fmt: skip
    compile_bytecode()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        rows = commands(trace, small, tmp, args.runs)
        db = str(tmp / "base.duckdb")  # the small trace's store, left by `commands`
        startup = {
            "python -c pass": whole([sys.executable, "-c", "pass"], args.runs),
            "hpa --version": whole([HPA, "--version"], args.runs),
            'hpa query "SELECT 1"': whole([HPA, "query", "SELECT 1", "--db", db], args.runs),
        }
        peer_rows = peers(trace, tmp, args.runs, not args.no_trie)
        firsts = first_runs(tmp)
    report(startup, rows, peer_rows, firsts, tokens)


if __name__ == "__main__":
    main()
