"""Every bundled sample trace validates against analyzer/schemas/trace.schema.json and
ingests cleanly."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jsonschema
import pytest

from analyzer.store.ingest import ingest

ROOT = Path(__file__).parents[1]
SCHEMA = json.loads((ROOT / "analyzer" / "schemas" / "trace.schema.json").read_text())
SAMPLES = sorted(p for p in (ROOT / "sample_traces").iterdir() if ".jsonl" in p.name)


def records(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def test_there_are_samples():
    assert len(SAMPLES) >= 10


LIST_FIELDS = ("prompt_token_ids", "output_token_ids", "block_hash_ids")


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_validates_against_schema(path):
    """Every record validates. Array items are checked once per distinct (type, value): item
    constraints are independent of position, and this keeps the test fast on millions of ids."""
    validator = jsonschema.Draft202012Validator(SCHEMA)
    items: dict[str, dict] = {name: {} for name in LIST_FIELDS}
    for i, record in enumerate(records(path), 1):
        shallow = dict(record)
        for name in LIST_FIELDS:
            if isinstance(record.get(name), list):
                items[name].update({(type(v), v): v for v in record[name]})
                shallow[name] = record[name][:1]
        errors = list(validator.iter_errors(shallow))
        assert not errors, f"{path.name}:{i}: {errors[0].message}"
    for name, distinct in items.items():
        item_validator = jsonschema.Draft202012Validator(SCHEMA["properties"][name]["items"])
        bad = [v for v in distinct.values() if not item_validator.is_valid(v)]
        assert not bad, f"{path.name}: {name} has invalid items {bad[:5]}"


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_ingests_without_rejects(path, tmp_path):
    result = ingest([path], db_path=tmp_path / "s.duckdb")
    assert result.num_rejected == 0 and result.num_stored == sum(1 for _ in records(path))


def test_the_demo_writes_the_bundled_samples_byte_for_byte(tmp_path):
    """`hpa demo` outside a clone synthesizes the samples; they are these files (and
    make_samples.sh's: the same scenarios, seeds and parameters)."""
    from analyzer.pipeline.demo import SAMPLE_FILES, write_samples

    folder = write_samples(tmp_path / "samples")
    assert sorted(name for name, *_ in SAMPLE_FILES) == sorted(p.name for p in SAMPLES)
    for path in SAMPLES:
        assert (folder / path.name).read_bytes() == path.read_bytes(), path.name
