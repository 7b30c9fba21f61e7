"""`hpa demo`: the whole pipeline on the bundled `sample_traces/`.

The realistic `mixed` trace goes into one database: ingest, prefix matching, then a
replay under several policies (one knob at a time). Each small worked-example trace
(docs/definitions.md#worked-examples) goes into its own database, since each is a separate
experiment with its own ids, and is replayed with the geometry it was made for.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from analyzer.errors import InputFileError
from analyzer.pipeline.match import MatchSummary, match_prefixes
from analyzer.pipeline.replay import run_replay
from analyzer.pipeline.sweep import run_sweeps
from analyzer.report.html import render_report
from analyzer.sim.dispatch import make_policy
from analyzer.store.db import load_sql
from analyzer.store.ingest import IngestResult, ingest
from analyzer.store.query import run_query
from analyzer.traces.io import is_scratch
from analyzer.traces.synth import generate, write_jsonl

MAIN_TRACE = "mixed.jsonl.gz"
MODEL = "qwen3-next-80b-a3b"
# One knob at a time against the vLLM 0.33 default (retention 0, vllm serve's 8192 budget).
POLICIES = {
    "vllm default": {},
    "retention null": {"retention_interval": None},
    "chunked 2048": {"max_num_batched_tokens": 2048},
    "chunked 2048 + retention null": {"max_num_batched_tokens": 2048, "retention_interval": None},
    "pool 2000 blocks": {"num_blocks": 2000},
    "eagle drop": {"spec_decode": "eagle_drop"},
    "round robin x2": {"routing": "round_robin", "replicas": 2},
    # Other engines' designs on the same trace and geometry (docs/definitions.md#other-designs),
    # then the ceiling.
    "sglang no_buffer": {"engine": "sglang"},
    "sglang extra_buffer": {"engine": "sglang", "sglang_strategy": "extra_buffer"},
    "marconi": {"engine": "marconi"},
    "trtllm every block": {"engine": "trtllm", "trtllm_interval": 544},
    "llama.cpp 1 slot": {"engine": "llamacpp"},
    "suffix replay 512": {"engine": "suffix_replay"},
    "oracle bound": {"engine": "oracle"},
}
# Capacity: the hybrid pool by replays, and a full-attention-only curve from one pass.
SWEEPS = (
    ([f"model={MODEL}"], ["num_blocks=250,500,1000,2000,4000"]),
    ([f"model={MODEL}", 'groups=["full_attention"]'], ["num_blocks=auto"]),
)
CASE_GEOMETRY = {
    "diagnostic": {"block_size": 544},
    "groups": {"block_size": 528},
    "mixed_hash_ids": {"block_size": 64},
}


@dataclass(frozen=True)
class DemoResult:
    db_path: Path
    ingested: IngestResult
    matched: MatchSummary
    policies: pa.Table  # one row per policy: totals and ratios
    cases: pa.Table  # one row per worked-example trace
    num_sweep_points: int
    report_path: Path


# The bundled samples as sample_traces/make_samples.sh writes them, byte for byte:
# (file, scenario, seed, synth parameters, block size of hash ids or None).
SAMPLE_FILES = (
    *(
        (f"diagnostic_{n}.jsonl", "diagnostic", 0, {"shared_tokens": n}, None)
        for n in (543, 545, 1087, 1088, 1089, 1632)
    ),
    *((f"groups_{n}.jsonl", "groups", 0, {"shared_tokens": n}, None) for n in (1600, 1500)),
    (MAIN_TRACE, "mixed", 0, {"num_requests": 2500}, None),
    ("mixed_hash_ids.jsonl.gz", "mixed", 1, {"num_requests": 300}, 16),
)


# What a demo writes into its folder (a killed one may leave the store's write-ahead log, its
# spill folder and the report's temporary file too, `is_scratch`): a folder holding only
# these is an earlier demo's.
DEMO_ENTRIES = frozenset(
    {"cases", "samples", "demo.duckdb", "demo.duckdb.wal", "demo.duckdb.tmp", "report.html"}
)


def _demos(name: str) -> bool:
    """Whether a demo wrote the entry `name` of its folder."""
    return name in DEMO_ENTRIES or is_scratch(name)


def _fresh_out(out: Path) -> Path:
    """`out` emptied and made, with its `cases` folder: an earlier demo's folder is replaced,
    any other that holds something is refused (`--out .` would delete the user's files).

    Raises:
        InputFileError: `out` holds files no demo wrote, or it cannot be made."""
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if not _demos(p.name))
        if foreign:
            shown = ", ".join(foreign[:3]) + (
                f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
            )
            raise InputFileError(
                f"--out {out}: holds {shown}, which no demo wrote; the demo replaces its "
                "folder, so give it a new or empty one, or an earlier demo's"
            )
    try:
        if out.exists():
            shutil.rmtree(out)
        (out / "cases").mkdir(parents=True)
    except OSError as exc:
        raise InputFileError(f"--out {out}: cannot make it ({exc.strerror or exc})") from None
    return out


def find_samples(start: Path | None = None) -> Path | None:
    """The `sample_traces/` folder in the working directory or above it, else the one of
    the clone this package runs from; None when neither exists (an installed package)."""
    here = (start or Path.cwd()).resolve()
    package_clone = Path(__file__).resolve().parents[2]
    for folder in (here, *here.parents, package_clone):
        if (folder / "sample_traces" / MAIN_TRACE).is_file():
            return folder / "sample_traces"
    return None


def write_samples(folder: Path) -> Path:
    """The bundled samples written into `folder` by the synthesizer (the same bytes as
    sample_traces/: every sample is seeded)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, scenario, seed, params, block_size in SAMPLE_FILES:
        records = generate(scenario, seed=seed, block_size=block_size, arrays=True, **params)
        write_jsonl(records, folder / name)
    return folder


def run_demo(
    out_dir: str | Path,
    *,
    samples_dir: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> DemoResult:
    """Run every stage on the samples into fresh databases under `out_dir` (replaced).

    `progress(stages done, total stages)` is called after each stage."""
    total = 2 + len(POLICIES) + len(SWEEPS) + 2
    done = [0]

    def step() -> None:
        done[0] += 1
        if progress:
            progress(done[0], total)

    samples = Path(samples_dir) if samples_dir else find_samples()
    if samples is not None and not (samples / MAIN_TRACE).is_file():
        raise InputFileError(f"{samples}: no {MAIN_TRACE} in this folder")
    out = _fresh_out(Path(out_dir))
    try:
        return _stages(out, samples, step)
    except BaseException:  # an error, Ctrl-C: no half-made demo is left behind
        shutil.rmtree(out, ignore_errors=True)
        raise


def _stages(out: Path, samples: Path | None, step: Callable[[], None]) -> DemoResult:
    """Every stage of the demo into the fresh folder `out`."""
    if samples is None:  # no clone around: make them (seeded, so the same as bundled)
        samples = write_samples(out / "samples")
    db_path = out / "demo.duckdb"
    ingested = ingest([samples / MAIN_TRACE], db_path=db_path)
    step()
    matched = match_prefixes(db_path, backend="numpy")
    step()
    for overrides in POLICIES.values():
        run_replay(make_policy({"model": MODEL, **overrides}), db_path=db_path)
        step()
    policies = _policy_table(db_path)
    num_points = 0
    for overrides, varies in SWEEPS:
        for sweep in run_sweeps(None, overrides, varies, db_path=db_path):
            num_points += len(sweep.points)
        step()
    report = render_report(db_path, out / "report.html")
    step()
    cases = _cases(samples, out / "cases")
    step()
    return DemoResult(db_path, ingested, matched, policies, cases, num_points, report.path)


def _policy_table(db_path: Path) -> pa.Table:
    table = run_query(
        load_sql("demo_policy_totals"),
        db_path=db_path,
    )
    return table.drop(["run_id"]).add_column(0, "policy", pa.array(list(POLICIES)))


def _cases(samples: Path, folder: Path) -> pa.Table:
    rows = []
    for path in sorted(samples.glob("*.jsonl*")):
        if path.name == MAIN_TRACE:
            continue
        name = path.name.split(".")[0]
        db = folder / f"{name}.duckdb"
        ingest([path], db_path=db)
        geometry = next(g for prefix, g in CASE_GEOMETRY.items() if name.startswith(prefix))
        run_replay(make_policy(geometry), db_path=db)
        per_request = run_query(load_sql("demo_case_rows"), db_path=db).to_pylist()
        shown = per_request if len(per_request) <= 4 else per_request[:4]
        rows.append(
            {
                "trace": path.name,
                "block_size": geometry["block_size"],
                "num_requests": len(per_request),
                "hit_tokens": sum(r["hit_tokens"] for r in per_request),
                "sparse_retention_miss_tokens": sum(
                    r["sparse_retention_miss_tokens"] for r in per_request
                ),
                "first_requests_hit/miss": ", ".join(
                    f"{r['hit_tokens']}/{r['sparse_retention_miss_tokens']}" for r in shown
                ),
            }
        )
    return pa.Table.from_pylist(rows)
