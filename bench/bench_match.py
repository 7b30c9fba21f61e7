"""Prefix matcher benchmark: the matchers against a plain Python dict-trie doing the same
job (per request: shared_any_tokens + parent, shared_replica_tokens,
shared_conversation_tokens), on the same generated trace, in the same run.

Contenders: `radix` (what `hpa match` does on the CPU: the ids streamed once out of DuckDB
through the compiled radix tree, which keeps the ones no earlier request had), `numpy` (the
vectorised matcher reading chunks from DuckDB: what it does under a million ids), `cupy`
(the same on the GPU), `trie`.

Each contender runs in its own child process reading the same DuckDB file, so its peak
memory (ru_maxrss of the child) is its own; both include reading the sequences from
DuckDB. Their per-request answers must be identical, or the benchmark fails.

    python bench/bench_match.py                  # >= 50 M prompt tokens (make bench-match)
    python bench/bench_match.py --tokens 5e6     # quicker
    python bench/bench_match.py --backends numpy,cupy --source memory   # GPU check

Throughput is prompt (queried) tokens per second of wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer.prefixes.engine import DEFAULT_CHUNK_TOKENS  # noqa: E402
from analyzer.prefixes.memory import MemorySource  # noqa: E402
from analyzer.prefixes.source import RequestMeta  # noqa: E402
from bench.common import run_measured  # noqa: E402

_FIELDS = ("shared_any", "parent", "shared_replica", "shared_conversation")
_TEXT = (
    "request_id",
    "model_revision",
    "prompt_family",
    "replica",
    "conversation_id",
    "parent_request_id",
    "cache_salt",
    "tenant",
)


# -- the trace --------------------------------------------------------------------------
def ensure_trace(tokens: int, seed: int, data: Path) -> Path:
    """A DuckDB store holding `mixed` synth requests totalling >= `tokens` prompt tokens."""
    from analyzer.store.db import connect
    from analyzer.traces.synth import generate

    data.mkdir(parents=True, exist_ok=True)
    path = data / f"match_mixed_{tokens}_{seed}.duckdb"
    if path.exists():
        return path
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    started = time.perf_counter()
    con = connect(tmp)
    batch: list[dict] = []
    records = generate("mixed", seed=seed, arrays=True, scale_tokens=tokens)
    for seq, record in enumerate(records):
        batch.append({**record, "arrival_seq": seq})
        if len(batch) == 2000:
            _insert(con, batch)
            batch = []
    if batch:
        _insert(con, batch)
    con.close()
    tmp.rename(path)
    print(f"generated {path} in {time.perf_counter() - started:.1f} s", flush=True)
    return path


def _insert(con, batch: list[dict]) -> None:
    def ids(key: str) -> pa.Array:
        return pa.array(
            [r[key].tolist() if key in r else None for r in batch], pa.list_(pa.int32())
        )

    columns = {key: pa.array([r.get(key) for r in batch], pa.string()) for key in _TEXT}
    columns.update(
        source_id=pa.array([1] * len(batch), pa.int32()),
        line_no=pa.array([r["arrival_seq"] + 1 for r in batch], pa.int64()),
        arrival_seq=pa.array([r["arrival_seq"] for r in batch], pa.int64()),
        timestamp_s=pa.array([r["timestamp"] for r in batch], pa.float64()),
        prompt_tokens=pa.array([len(r["prompt_token_ids"]) for r in batch], pa.int32()),
        prompt_token_ids=ids("prompt_token_ids"),
        output_tokens=pa.array([r.get("output_tokens") for r in batch], pa.int32()),
        output_token_ids=ids("output_token_ids"),
        ttft_ms=pa.array([r.get("ttft_ms") for r in batch], pa.float64()),
    )
    con.register("bench_batch", pa.table(columns))
    con.execute("INSERT INTO requests BY NAME SELECT * FROM bench_batch")
    con.unregister("bench_batch")


# -- the contenders (each in a child process) ---------------------------------------------
def run_child(contender: str, db: Path, out: Path, source_kind: str, chunk_tokens: int) -> None:
    import duckdb

    from analyzer.access.sources import DuckDBSource
    from analyzer.prefixes.backend import get_xp
    from analyzer.prefixes.engine import MatchOptions, run_matcher
    from analyzer.prefixes.source import PartitionSource

    con = duckdb.connect(str(db), read_only=True)
    source = DuckDBSource(con)
    if source_kind == "memory":
        source = _preload(source)
    base_mib = _peak_mib()
    started = time.perf_counter()
    options = MatchOptions(chunk_tokens=chunk_tokens)
    if contender == "trie":
        arrays = trie_views(source, options)
    elif contender == "radix":
        warm = _preload(source, 200)  # compile (or load) the kernel off the clock
        run_matcher(
            PartitionSource(warm.meta, warm.flat, warm.offsets),
            xp=np,
            options=MatchOptions(compiled_min_units=0),
        )
        started = time.perf_counter()
        if source_kind == "memory":
            source = PartitionSource(source.meta, source.flat, source.offsets)
        # from DuckDB: the ids streamed once through the trees, as `hpa match` does
        arrays = run_matcher(source, xp=np, options=options)
        arrays = {name: getattr(arrays, name) for name in _FIELDS}
    else:
        xp = get_xp(contender)
        vectorised = replace(options, compiled_min_units=1 << 62)  # never the radix tree
        if contender == "cupy":  # warm up kernels and the memory pool off the clock
            run_matcher(_preload(source, 200), xp=xp, options=vectorised)
            started = time.perf_counter()
        arrays = run_matcher(source, xp=xp, options=vectorised)
        arrays = {name: getattr(arrays, name) for name in _FIELDS}
    seconds = time.perf_counter() - started
    np.savez(out.with_suffix(".npz"), **arrays)
    meta = source.meta
    out.write_text(
        json.dumps(
            {
                "seconds": seconds,
                "peak_mib": _peak_mib(),
                "base_mib": base_mib,
                "prompt_tokens": int(meta.query_len.sum()),
                "inserted_tokens": int(meta.insert_len.sum()),
                "requests": meta.n,
            }
        )
    )


def _preload(source, n: int | None = None) -> MemorySource:
    """The first `n` requests (all by default) held in memory."""
    meta = source.meta
    n = meta.n if n is None else min(n, meta.n)
    chunk = source.read(0, n)
    head = RequestMeta(
        *(
            getattr(meta, f)[:n]
            for f in (
                "ns_any",
                "ns_replica",
                "ns_conversation",
                "query_len",
                "insert_len",
                "block_size",
                "prompt_tokens",
            )
        ),
        namespaces=meta.namespaces,
    )
    return MemorySource(head, chunk.flat, chunk.offsets)


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def trie_views(source, options) -> dict[str, np.ndarray]:
    """The plain trie doing the matcher's job: one dict-trie per namespace per view."""
    from analyzer.prefixes.engine import chunk_bounds
    from analyzer.prefixes.trie import DictTrie

    meta: RequestMeta = source.meta
    views = (meta.ns_any, meta.ns_replica, meta.ns_conversation)
    tries: tuple[dict, dict, dict] = ({}, {}, {})
    shared = np.full((3, meta.n), -1, dtype=np.int64)
    parent = np.full(meta.n, -1, dtype=np.int64)
    qlen = meta.query_len.tolist()
    for start, stop in chunk_bounds(meta.insert_len, options):
        chunk = source.read(start, stop)
        flat, offsets = chunk.flat.tolist(), chunk.offsets.tolist()
        for i in range(start, stop):
            seq = flat[offsets[i - start] : offsets[i - start + 1]]
            prompt = seq[: qlen[i]]
            for v, ns in enumerate(views):
                key = int(ns[i])
                if key < 0:
                    continue
                trie = tries[v].get(key) or tries[v].setdefault(key, DictTrie())
                shared[v, i], holder = trie.lookup(prompt)
                if v == 0:
                    parent[i] = holder
                trie.insert(seq, i)
    return {
        "shared_any": shared[0],
        "parent": parent,
        "shared_replica": shared[1],
        "shared_conversation": shared[2],
    }


# -- the run ------------------------------------------------------------------------------
def contend(contender: str, db: Path, tmp: Path, args) -> tuple[dict, dict]:
    out = tmp / f"{contender}.json"
    cmd = [
        sys.executable,
        __file__,
        "--child",
        contender,
        "--db",
        str(db),
        "--result",
        str(out),
        "--source",
        args.source,
        "--chunk-tokens",
        str(args.chunk_tokens),
    ]
    # Through bench.common's launcher: this process may hold the trace it just generated,
    # and a child's peak RSS would start at this process's (292 against 120 MiB at 5 M tokens).
    done = run_measured(cmd)
    sys.stdout.write(done["stdout"])
    if done["rc"]:
        raise SystemExit(f"{contender} failed: {done['stderr'].strip()[-500:]}")
    with np.load(out.with_suffix(".npz")) as arrays:
        return json.loads(out.read_text()), {k: arrays[k] for k in arrays.files}


def main() -> int:
    args = _parse()
    if args.child:
        run_child(args.child, Path(args.db), Path(args.result), args.source, args.chunk_tokens)
        return 0
    db = ensure_trace(int(float(args.tokens)), args.seed, Path(args.data))
    contenders = args.backends.split(",") + ([] if args.no_trie else ["trie"])
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in contenders:
            results[name] = contend(name, db, Path(tmp), args)
            _report_one(name, results[name][0])
    return _compare(results, contenders)


def _report_one(name: str, stats: dict) -> None:
    rate = stats["prompt_tokens"] / stats["seconds"]
    print(
        f"{name:>6}: {stats['requests']:,} requests, {stats['prompt_tokens']:,} prompt tokens "
        f"({stats['inserted_tokens']:,} inserted) in {stats['seconds']:.2f} s = "
        f"{rate / 1e6:,.2f} M tokens/s; peak {stats['peak_mib']:,.0f} MiB "
        f"(after loading: {stats['base_mib']:,.0f} MiB)",
        flush=True,
    )


def _compare(results: dict, contenders: list[str]) -> int:
    """Every contender against the reference (the trie, else the first backend)."""
    ref_name = "trie" if "trie" in contenders else contenders[0]
    ref_stats, ref = results[ref_name]
    ok = True
    for name in contenders:
        if name == ref_name:
            continue
        stats, arrays = results[name]
        same = all(np.array_equal(arrays[k], ref[k]) for k in _FIELDS)
        ok &= same
        speed = ref_stats["seconds"] / stats["seconds"]
        memory = stats["peak_mib"] / ref_stats["peak_mib"]
        print(
            f"{name} vs {ref_name}: results {'identical' if same else 'DIFFERENT'}; "
            f"{speed:.3g}x the tokens/s, {memory:.2f}x the peak memory "
            f"(this machine: {os.cpu_count()} cores)"
        )
    return 0 if ok else 1


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", default="50e6", help="prompt tokens to generate (default 50e6)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--data", default=str(ROOT / "bench" / "data"), help="where traces are kept")
    p.add_argument("--backends", default="radix,numpy", help="comma list: radix, numpy, cupy")
    p.add_argument("--no-trie", action="store_true", help="skip the trie (backend comparison)")
    p.add_argument(
        "--source",
        default="duckdb",
        choices=["duckdb", "memory"],
        help="memory: preload sequences, time the matcher alone",
    )
    p.add_argument(
        "--chunk-tokens",
        type=int,
        default=DEFAULT_CHUNK_TOKENS,
        help="matcher chunk size in tokens (memory only, never results)",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--db", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    return p.parse_args()


if __name__ == "__main__":
    sys.exit(main())
