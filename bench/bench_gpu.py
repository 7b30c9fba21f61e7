"""The GPU prefix matcher on a GPU machine (`make bench-gpu` runs it through gpu_check.sh):
the device's sort and scan rates, the sort matcher on CuPy against the C radix tree in
process on the same ids (answers must be identical), and `hpa match` as whole processes
(`--backend cupy` against `--backend numpy`), each on a first run (CuPy's kernel cache
empty) and warm, and where the sort matcher starts to beat the radix tree (`crossover`: the
first 1, 4, 16 and 64 M units of the trace, and all of it; what `--backend auto` needs).
Everything it prints is also written as JSON to --out.

    python bench/bench_gpu.py --tokens 50e6 --out $OUT/gpu.json
    python bench/bench_gpu.py --tokens 2e6 --dry-run     # no GPU: the NumPy steps instead

`--dry-run` runs every step with NumPy in place of CuPy (the sort matcher's plain steps):
a check of the script on a CPU machine before device time is spent on it, not a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

FIELDS = ("shared_any", "parent", "shared_replica", "shared_conversation", "insert_shared")


def primitive_rates(xp, units: int) -> dict:
    """Sort, argsort, cumsum and searchsorted rates on `units` random uint64 (G elements/s),
    each timed after one untimed call."""
    rng = np.random.default_rng(1)
    keys = xp.asarray(rng.integers(0, 2**63, units, dtype=np.int64).view(np.uint64))
    needles = keys[: units // 16]
    calls = {
        "sort": lambda: xp.sort(keys),
        "argsort": lambda: xp.argsort(keys),
        "cumsum": lambda: xp.cumsum(keys),
        "searchsorted (1/16)": lambda: xp.searchsorted(keys, needles),
    }
    out = {}
    for name, call in calls.items():
        call()
        _sync(xp)
        started = time.perf_counter()
        call()
        _sync(xp)
        out[name] = units / (time.perf_counter() - started) / 1e9
    return out


def _sync(xp) -> None:
    if xp is not np:
        xp.cuda.Device().synchronize()


def in_process(db: Path, xp, dry_run: bool) -> dict:
    """The sort matcher on `xp` against the radix tree, on the same held ids."""
    import duckdb

    from analyzer.access.sources import DuckDBSource
    from analyzer.prefixes.engine import MatchOptions, run_matcher
    from analyzer.prefixes.source import PartitionSource

    con = duckdb.connect(str(db), read_only=True)
    held = DuckDBSource(con).held()
    held = PartitionSource(held.meta, held.flat, held.offsets)
    tokens = int(held.meta.query_len.sum())
    units = int(held.meta.insert_len.sum())
    timings: dict = {"prompt_tokens": tokens, "units": units}
    started = time.perf_counter()
    radix = run_matcher(held, xp=np, options=MatchOptions(compiled_min_units=0))
    timings["radix_s"] = time.perf_counter() - started
    sort = MatchOptions(matcher="sort", compiled_min_units=1 << 62)
    for run in ("first", "warm", "warm 2"):
        started = time.perf_counter()
        got = run_matcher(held, xp=xp, options=sort)
        _sync(xp)
        timings[f"sort_{run}_s"] = time.perf_counter() - started
    for field in FIELDS:
        if not np.array_equal(getattr(got, field), getattr(radix, field)):
            raise SystemExit(f"the sort matcher's {field} differs from the radix tree's")
    timings["equal"] = True
    timings["fallbacks"] = got.exact_fallbacks
    best = min(timings["sort_warm_s"], timings["sort_warm 2_s"])
    timings["sort_G_tokens_per_s"] = tokens / best / 1e9
    timings["radix_G_tokens_per_s"] = tokens / timings["radix_s"] / 1e9
    return timings


def crossover(db: Path, xp, sizes: list[int]) -> dict:
    """The radix tree and the sort matcher (warm: one untimed call first) on the first
    requests of the trace up to each of `sizes` units, answers checked equal: where the
    sort matcher starts to win is what `--backend auto` needs (issue 50, item 3)."""
    import dataclasses

    import duckdb

    from analyzer.access.sources import DuckDBSource
    from analyzer.prefixes.engine import MatchOptions, run_matcher
    from analyzer.prefixes.source import PartitionSource

    con = duckdb.connect(str(db), read_only=True)
    held = DuckDBSource(con).held()
    con.close()
    ends = np.cumsum(held.meta.insert_len)
    rows = []
    for size in sizes:
        k = int(np.searchsorted(ends, size, side="right")) or 1
        meta = dataclasses.replace(
            held.meta,
            **{
                f.name: getattr(held.meta, f.name)[:k]
                for f in dataclasses.fields(held.meta)
                if f.name != "namespaces"
            },
        )
        offsets = held.offsets[: k + 1]
        part = PartitionSource(meta, held.flat[: offsets[-1]], offsets)
        started = time.perf_counter()
        radix = run_matcher(part, xp=np, options=MatchOptions(compiled_min_units=0))
        radix_s = time.perf_counter() - started
        sort = MatchOptions(matcher="sort", compiled_min_units=1 << 62)
        run_matcher(part, xp=xp, options=sort)  # kernels compiled, memory pools warm
        _sync(xp)
        started = time.perf_counter()
        got = run_matcher(part, xp=xp, options=sort)
        _sync(xp)
        sort_s = time.perf_counter() - started
        for field in FIELDS:
            if not np.array_equal(getattr(got, field), getattr(radix, field)):
                raise SystemExit(f"{k} requests: the sort matcher's {field} differs")
        rows.append(
            {"requests": k, "units": int(ends[k - 1]), "radix_s": radix_s, "sort_warm_s": sort_s}
        )
    wins = [r["units"] for r in rows if r["sort_warm_s"] < r["radix_s"]]
    return {"rows": rows, "sort_wins_from_units": min(wins) if wins else None}


def whole_processes(db: Path, dry_run: bool, runs: int) -> dict:
    """`hpa match` as a user runs it: --backend cupy (a first run with CuPy's kernel cache
    empty, then warm) and --backend numpy, interleaved; medians."""
    hpa = [sys.executable, "-m", "analyzer"]
    out: dict = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, CUPY_CACHE_DIR=cache)
        backends = ("numpy",) if dry_run else ("cupy", "numpy")
        for i in range(runs + 1):
            for backend in backends:
                started = time.perf_counter()
                subprocess.run(
                    [*hpa, "match", "--db", str(db), "--backend", backend],
                    check=True,
                    capture_output=True,
                    env=env,
                )
                key = f"{backend}_first_s" if i == 0 else f"{backend}_warm_s"
                out.setdefault(key, []).append(time.perf_counter() - started)
    return {k: float(np.median(v)) for k, v in out.items()}


def ensure_store(tokens: int, seed: int, data: Path) -> Path:
    """A store of a `mixed` trace of about `tokens` prompt tokens, made as a user makes one
    (`hpa synth`, `hpa ingest`), kept in `data`."""
    db = data / f"gpu_mixed_{tokens}_{seed}.duckdb"
    if db.exists():
        return db
    data.mkdir(parents=True, exist_ok=True)
    hpa = [sys.executable, "-m", "analyzer"]
    with tempfile.TemporaryDirectory() as tmp:
        trace, building = Path(tmp) / "mixed.jsonl", Path(tmp) / "store.duckdb"
        synth = ["synth", "--seed", str(seed), "--param", f"scale_tokens={tokens}", str(trace)]
        subprocess.run([*hpa, *synth], check=True, capture_output=True)
        subprocess.run([*hpa, "ingest", "--db", str(building), str(trace)], check=True)
        building.rename(db)
    return db


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", default="50e6")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--data", default=str(ROOT / "bench" / "data"))
    p.add_argument("--runs", type=int, default=2, help="warm whole-process runs per backend")
    p.add_argument("--primitive-units", type=int, default=1 << 26)
    p.add_argument("--out", help="write the figures as JSON here")
    p.add_argument("--dry-run", action="store_true", help="NumPy in place of CuPy")
    args = p.parse_args()
    if args.dry_run:
        xp = np
    else:
        from analyzer.prefixes.backend import get_xp

        xp = get_xp("cupy")
    db = ensure_store(int(float(args.tokens)), args.seed, Path(args.data))
    report: dict = {"device": _device(xp), "dry_run": args.dry_run}
    if not args.dry_run:  # the key of backend.GPU_WINS_FROM_UNITS for `crossover`'s figure
        from analyzer.prefixes.backend import _card_name

        report["card"] = _card_name()
    report["primitives_G_per_s"] = primitive_rates(
        xp._cp if hasattr(xp, "_cp") else xp, args.primitive_units
    )
    report["in_process"] = in_process(db, xp, args.dry_run)
    units = report["in_process"]["units"]
    ladder = [u for u in (1 << 20, 1 << 22, 1 << 24, 1 << 26) if u < units] + [units]
    report["crossover"] = crossover(db, xp, ladder)
    report["whole_process_s"] = whole_processes(db, args.dry_run, args.runs)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


def _device(xp) -> str:
    if xp is np:
        return "CPU (dry run: NumPy)"
    props = xp.cuda.runtime.getDeviceProperties(0)
    return f"{props['name'].decode()} ({props['totalGlobalMem'] / 2**30:.0f} GiB)"


if __name__ == "__main__":
    raise SystemExit(main())
