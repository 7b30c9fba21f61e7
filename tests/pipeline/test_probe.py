"""`hpa probe`: the seed article's diagnostic for a policy's geometry.

Expected tables are written by hand from docs/definitions.md#worked-examples (B=544, prompts of k +
2B tokens): a cold request never hits; a repeat whose shared prefix ends just after a block boundary
matches that boundary in attention, just before it the previous one; under retention 0 the first
repeat loses the match as a sparse-retention miss and the second hits it (miss, miss, hit);
a Mamba state exists only where a prefill chunk ended, so a retention interval N keeps a
state at N only when chunks end there (a token budget of one block).
"""

from __future__ import annotations

import csv
import os

import orjson
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.pipeline.probe import TOKEN_RANGE, design_requests, write_probe
from analyzer.pipeline.replay import run_replay
from analyzer.pipeline.validate import validate
from analyzer.sim.dispatch import load_policy
from analyzer.store.ingest import ingest
from tests.conftest import db_rows

MISS_MISS_HIT_1088 = [(2176, 0, 0), (2176, 0, 1088), (2176, 1088, 0)]
MISS_MISS_HIT_544 = [(2176, 0, 0), (2176, 0, 544), (2176, 544, 0)]
DEFAULT_B544 = {
    "shared-1088": MISS_MISS_HIT_1088,  # the article: 0/0, 0/1,088, 1,088/0
    "block-before-1087": MISS_MISS_HIT_544,  # worked examples: "as 545"
    "block-after-1089": MISS_MISS_HIT_1088,  # worked examples: "as 1,088"
}
# (preset, --set overrides) -> {family: [(queries, hits, sparse misses) per request]}
CASES = {
    "vllm-default B=544": ("vllm-default", ["block_size=544"], DEFAULT_B544),
    "vllm-default, qwen3-next preset": (
        "vllm-default",
        ["model=qwen3-next-80b-a3b"],
        DEFAULT_B544,
    ),
    "vllm-dense, budget 544 (worked example: 0/0, 1088/0, 1088/0)": (
        "vllm-dense",
        ["block_size=544", "max_num_batched_tokens=544"],
        {
            "shared-1088": [(2176, 0, 0), (2176, 1088, 0), (2176, 1088, 0)],
            "block-before-1087": [(2176, 0, 0), (2176, 544, 0), (2176, 544, 0)],
            "block-after-1089": [(2176, 0, 0), (2176, 1088, 0), (2176, 1088, 0)],
        },
    ),
    "retention 1632, budget 544": (
        "vllm-default",
        ["block_size=544", "retention_interval=1632", "max_num_batched_tokens=544"],
        {
            **DEFAULT_B544,  # 1,088 is no multiple of 1,632: junction learned as before
            "retention-before-1631": [(2720, 0, 0), (2720, 0, 1088), (2720, 1088, 0)],
            "retention-after-1633": [(2720, 0, 0), (2720, 1632, 0), (2720, 1632, 0)],
        },
    ),
    "retention 1632 without a budget: no chunk ends at 1632": (
        "vllm-default",
        ["block_size=544", "retention_interval=1632"],
        {
            **DEFAULT_B544,
            "retention-before-1631": [(2720, 0, 0), (2720, 0, 1088), (2720, 1088, 0)],
            "retention-after-1633": [(2720, 0, 0), (2720, 0, 1632), (2720, 1632, 0)],
        },
    ),
    "match unit 272: sub-block hits only at registered partial boundaries": (
        "vllm-default",
        ["block_size=544", "prefix_match_unit=272"],
        {
            "shared-1088": MISS_MISS_HIT_1088,
            "match_unit-before-815": [(1904, 0, 0), (1904, 0, 544), (1904, 544, 0)],
            "match_unit-after-817": [(1904, 0, 0), (1904, 0, 544), (1904, 544, 0)],
            "block-before-1087": MISS_MISS_HIT_544,
            "block-after-1089": MISS_MISS_HIT_1088,
        },
    ),
}


def read_csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("case", list(CASES))
def test_expected_table_follows_spec6(tmp_path, case):
    preset, overrides, expected = CASES[case]
    probe = write_probe(load_policy(preset, overrides), tmp_path, model="m")
    rows = read_csv(tmp_path / "expected.csv")
    got: dict[str, list] = {}
    for row in rows:
        got.setdefault(row["family"], []).append(
            tuple(
                int(row[c])
                for c in (
                    "prefix_cache_queries",
                    "prefix_cache_hits",
                    "prefix_cache_sparse_retention_misses",
                )
            )
        )
    assert got == expected
    assert [r["step"] for r in rows] == [r.step for r in probe.requests]
    assert [r["seq"] for r in rows] == [str(i) for i in range(1, len(rows) + 1)]
    assert all(r["error"] == "" for r in rows)


def lcp(a, b) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def test_families_isolated_and_prefixes_exact():
    policy = load_policy("vllm-default", ["block_size=544", "retention_interval=1632"])
    requests = design_requests(policy, seed=7)
    low, high = TOKEN_RANGE
    assert all(low <= t < high for r in requests for t in r.token_ids)
    for i, a in enumerate(requests):
        for b in requests[i + 1 :]:
            same_family = a.family == b.family
            assert lcp(a.token_ids, b.token_ids) == (a.family.prefix_tokens if same_family else 0)
    firsts = [r.token_ids[0] for r in requests if r.step.endswith("/cold")]
    assert len(set(firsts)) == len(firsts) == 5


def test_files_deterministic_byte_for_byte(tmp_path):
    policy = load_policy("vllm-default", ["model=qwen3.5-4b", "prefix_match_unit=264"])
    a = write_probe(policy, tmp_path / "a", seed=3)
    b = write_probe(policy, tmp_path / "b", seed=3)
    c = write_probe(policy, tmp_path / "c", seed=4)
    names = sorted(os.listdir(tmp_path / "a"))
    assert names == ["expected.csv", "probe.jsonl", "trace.jsonl"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "probe.jsonl").read_bytes() != (
        tmp_path / "c" / "probe.jsonl"
    ).read_bytes()
    # another seed changes the tokens, never the expected counters
    assert (tmp_path / "a" / "expected.csv").read_bytes() == (
        tmp_path / "c" / "expected.csv"
    ).read_bytes()
    assert a.requests == b.requests and a.model == c.model == "qwen3.5-4b"
    lines = [orjson.loads(x) for x in (tmp_path / "a" / "probe.jsonl").read_bytes().splitlines()]
    assert [x["step"] for x in lines] == [r.step for r in a.requests]
    body = lines[0]["body"]
    assert set(body) == {"model", "prompt", "max_tokens", "temperature"}
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("qwen3.5-4b", 1, 0)
    assert body["prompt"] == list(a.requests[0].token_ids)


def scrape(path, counters: dict[str, int]):
    """A /metrics text with one label set per counter (`prefix_cache_*` names)."""
    path.write_text(
        "".join(f'vllm:{c}_total{{engine="0",model_name="m"}} {v}.0\n' for c, v in counters.items())
    )
    return path


def test_trace_replays_to_expected_and_validates(tmp_path):
    """The written trace, ingested and replayed, gives expected.csv again; /metrics texts
    that agree with expected.csv validate with zero error."""
    policy = load_policy("vllm-default", ["block_size=544"])
    write_probe(policy, tmp_path / "p", model="m")
    db = tmp_path / "p.duckdb"
    ingest([tmp_path / "p" / "trace.jsonl"], db_path=db)
    run_replay(policy, db_path=db)
    replayed = db_rows(
        db,
        "SELECT request_id, prompt_tokens, hit_tokens, sparse_retention_miss_tokens "
        "FROM replay_requests WHERE run_id = 1 ORDER BY arrival_seq",
    )
    rows = read_csv(tmp_path / "p" / "expected.csv")
    assert replayed == [
        (
            r["step"],
            int(r["prefix_cache_queries"]),
            int(r["prefix_cache_hits"]),
            int(r["prefix_cache_sparse_retention_misses"]),
        )
        for r in rows
    ]
    sums = {
        c: sum(int(r[c]) for r in rows)
        for c in (
            "prefix_cache_queries",
            "prefix_cache_hits",
            "prefix_cache_sparse_retention_misses",
        )
    }
    after = scrape(tmp_path / "after.txt", sums)
    result = validate(db_path=db, metrics=after, model_name="m")
    assert [r["error_tokens"] for r in result.rows.to_pylist()] == [0, 0, 0]
    # one step alone: step 2 (timestamp 2) between the scrapes after steps 1 and 2
    step1 = scrape(tmp_path / "m1.txt", {c: int(rows[0][c]) for c in sums})
    step2 = scrape(tmp_path / "m2.txt", {c: int(rows[0][c]) + int(rows[1][c]) for c in sums})
    one = validate(db_path=db, metrics_before=step1, metrics_after=step2, since="2", until="3")
    got = [(r["observed_tokens"], r["error_tokens"]) for r in one.rows.to_pylist()]
    assert got == [(2176, 0), (0, 0), (1088, 0)]
    assert sums == {
        "prefix_cache_queries": 9 * 2176,
        "prefix_cache_hits": 1088 + 544 + 1088,
        "prefix_cache_sparse_retention_misses": 1088 + 544 + 1088,
    }


def test_cli_prints_table_and_hint(tmp_path):
    out = tmp_path / "probe"
    res = CliRunner().invoke(
        cli, ["probe", "--set", "block_size=544", "--out", str(out), "--model", "qwen"]
    )
    assert res.exit_code == 0, res.output
    assert "shared-1088/repeat-1" in res.output and "1,088" in res.output
    assert "9 requests for model 'qwen' (seed 0)" in res.output
    assert f"jq -c .body {out}/probe.jsonl" in res.output
    assert (out / "expected.csv").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "block_size=544"], "Error: --model: give the served model name"),
        (["--set", "colour=red", "--model", "m"], "Error: --set 'colour=red'"),
        (["--policy", "nope", "--model", "m"], "Error: policy 'nope'"),
    ],
)
def test_cli_errors_are_one_line(tmp_path, args, message):
    res = CliRunner().invoke(cli, ["probe", "--out", str(tmp_path / "p"), *args])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [res.output.strip()]
    assert res.output.startswith(message), res.output


def test_cli_error_unwritable_out(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = CliRunner().invoke(
        cli, ["probe", "--set", "block_size=544", "--model", "m", "--out", str(blocker / "d")]
    )
    assert (res.exit_code, res.output) == (
        2,
        f"Error: --out {blocker / 'd'}: {blocker} is not a folder\n",
    )
