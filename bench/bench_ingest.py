"""Ingest benchmark: `hpa ingest` against DuckDB's own read_json on the same JSONL file.

Both load the same generated trace into a DuckDB file, each in a fresh process; we print
prompt tokens/s, peak memory and the ratio (timings on shared machines are noisy: read
the ratio). Run: `make bench-ingest` or `python bench/bench_ingest.py --tokens 50000000`.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import measure, mixed_trace

HPA = """
from analyzer.store.ingest import ingest
"""
HPA_RUN = """
r = ingest([{path!r}], db_path={db!r})
result = r.num_stored
"""
DUCKDB = """
import duckdb
con = duckdb.connect({db!r})
"""
DUCKDB_RUN = """
con.execute("CREATE TABLE requests AS SELECT * FROM read_json({path!r}, "
            "format='newline_delimited')")
result = con.execute("SELECT count(*) FROM requests").fetchall()[0][0]
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--tokens",
        type=int,
        default=50_000_000,
        help="minimum prompt tokens in the generated trace",
    )
    args = parser.parse_args()
    path, num_requests, tokens = mixed_trace(args.tokens)
    size_mib = path.stat().st_size / 2**20
    print(
        f"trace: {path.name}, {num_requests:,} requests, {tokens:,} prompt tokens, "
        f"{size_mib:,.0f} MiB"
    )
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for name, setup, body in (
            ("hpa ingest", HPA, HPA_RUN),
            ("duckdb read_json", DUCKDB, DUCKDB_RUN),
        ):
            db = str(Path(tmp) / f"{name.split()[0]}.duckdb")
            runs[name] = measure(setup.format(db=db), body.format(path=str(path), db=db))
            assert runs[name]["result"] == num_requests, (name, runs[name])
    print(f"{'contender':<18} {'seconds':>8} {'M tokens/s':>11} {'peak MiB':>9}")
    for name, run in runs.items():
        print(
            f"{name:<18} {run['seconds']:>8.2f} {tokens / run['seconds'] / 1e6:>11.1f} "
            f"{run['peak_mib']:>9.0f}"
        )
    ours, theirs = runs["hpa ingest"], runs["duckdb read_json"]
    print(f"speed ratio hpa/duckdb: {theirs['seconds'] / ours['seconds']:.2f} (target >= 1.0)")
    third = _peak_on_first_third(path, num_requests)
    print(
        f"hpa peak memory: {third:.0f} MiB on the first third of the file, "
        f"{ours['peak_mib']:.0f} MiB on all of it ({size_mib:.0f} MiB): "
        f"x{ours['peak_mib'] / third:.2f} for x3 the data"
    )


def _peak_on_first_third(path: Path, num_requests: int) -> float:
    """Peak MiB of `hpa ingest` on the first third of the lines: memory must stay flat."""
    with tempfile.TemporaryDirectory() as tmp:
        part = Path(tmp) / "third.jsonl"
        with open(path, "rb") as src, open(part, "wb") as dst:
            for i, line in enumerate(src):
                if i >= num_requests // 3:
                    break
                dst.write(line)
        db = str(Path(tmp) / "third.duckdb")
        return measure(HPA.format(), HPA_RUN.format(path=str(part), db=db))["peak_mib"]


if __name__ == "__main__":
    main()
