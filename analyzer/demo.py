"""`hpa demo`: the whole pipeline on the bundled `sample_traces/`.

The realistic `mixed` trace goes into one database; each small worked-example trace
(SPEC 6) goes into its own, since each is a separate experiment with its own ids.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from analyzer.errors import InputFileError
from analyzer.store.ingest import IngestResult, ingest
from analyzer.store.query import stored_summary

MAIN_TRACE = "mixed.jsonl.gz"


@dataclass(frozen=True)
class DemoResult:
    db_path: Path
    ingested: IngestResult
    summary: pa.Table
    cases: dict[str, IngestResult]  # worked-example trace name -> its ingest


def find_samples(start: Path | None = None) -> Path:
    """The `sample_traces/` folder in the working directory or above it."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "sample_traces" / MAIN_TRACE).is_file():
            return folder / "sample_traces"
    raise InputFileError(
        f"no sample_traces/{MAIN_TRACE} in {here} or above; run from a clone of the "
        "project or pass --samples"
    )


def run_demo(out_dir: str | Path, *, samples_dir: str | Path | None = None) -> DemoResult:
    """Ingest the samples into fresh databases under `out_dir` (replaced if present)."""
    samples = Path(samples_dir) if samples_dir else find_samples()
    if not (samples / MAIN_TRACE).is_file():
        raise InputFileError(f"{samples}: no {MAIN_TRACE} in this folder")
    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    (out / "cases").mkdir(parents=True)
    db_path = out / "demo.duckdb"
    main = ingest([samples / MAIN_TRACE], db_path=db_path)
    cases = {
        path.name: ingest([path], db_path=out / "cases" / f"{path.name.split('.')[0]}.duckdb")
        for path in sorted(samples.glob("*.jsonl*"))
        if path.name != MAIN_TRACE
    }
    return DemoResult(db_path, main, stored_summary(db_path=db_path), cases)
