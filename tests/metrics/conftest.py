"""A small replayed database for the metrics tests: groups_1600 (32 requests, 8 families of
4, 1 s apart) with model revision rev-a for groups 0-3 and rev-b for 4-7, replayed twice
with B=528: run 1 keeps every Mamba state (retention null, budget 2,048: 38,016 hits, no
sparse misses), run 2 is vLLM's default (retention 0: 25,344 hits, 12,672 misses)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from tests.conftest import write_jsonl

SAMPLES = Path(__file__).parents[2] / "sample_traces"


def groups_records(**extra_by_index) -> list[dict]:
    records = [
        orjson.loads(line) for line in (SAMPLES / "groups_1600.jsonl").read_text().splitlines()
    ]
    for i, r in enumerate(records):
        r["model_revision"] = "rev-a" if i < 16 else "rev-b"
        for key, values in extra_by_index.items():
            r[key] = values[i]
    return records


def build_groups_db(path: Path, records: list[dict]) -> Path:
    trace = write_jsonl(path.with_suffix(".jsonl"), records)
    ingest([trace], db_path=path)
    run_replay(
        make_policy(
            {"block_size": 528, "retention_interval": None, "max_num_batched_tokens": 2048}
        ),
        db_path=path,
    )
    run_replay(make_policy({"block_size": 528}), db_path=path)
    return path


@pytest.fixture(scope="session")
def groups_db(tmp_path_factory) -> Path:
    """Read-only: do not write to it (it is shared by the whole session)."""
    return build_groups_db(tmp_path_factory.mktemp("metrics") / "groups.duckdb", groups_records())
