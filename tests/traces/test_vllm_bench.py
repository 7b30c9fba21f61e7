"""The vllm bench result adapter: stored rows, the shared random prefix, failed requests as
rejects, file errors, auto-detection, and a linear calibration on the result's TTFTs."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import InputFileError
from analyzer.store.ingest import ingest
from analyzer.traces.adapters.vllm_bench import BLOCK_SIZE
from analyzer.traces.readers import detect_format
from tests.conftest import db_rows

FIXTURE = (
    Path(__file__).parents[1]
    / "fixtures"
    / "vllm_bench"
    / "vllm-2.0qps-Qwen3-0.6B-20250611-101503.json"
)
FAILED = 4  # errors[4] is the fixture's failed request
PREFIX_BLOCKS = 32 // BLOCK_SIZE  # random_prefix_len "32"


def _result() -> dict:
    return orjson.loads(FIXTURE.read_bytes())


def _copy(tmp_path: Path, result: dict | None = None, name: str = "bench.json") -> Path:
    path = tmp_path / name
    if result is None:
        shutil.copy(FIXTURE, path)
    else:
        path.write_bytes(orjson.dumps(result) + b"\n")
    return path


def _ingest_cli(db: Path, path: Path):
    return CliRunner().invoke(cli, ["ingest", "--db", str(db), str(path), "--allow-rejects"])


def test_ingest_stores_each_request_that_did_not_fail(tmp_path, db):
    res = _ingest_cli(db, _copy(tmp_path))
    assert res.exit_code == 0, res.output
    src = _result()
    ok = [i for i in range(len(src["input_lens"])) if i != FAILED]
    assert f"read 10 = stored 9 + rejected 1 ({sum(src['input_lens'][i] for i in ok):,} " in (
        res.output
    )
    rows = db_rows(
        db,
        "SELECT request_id, line_no, timestamp_s, prompt_tokens, ttft_ms, output_tokens, "
        "len(block_hash_ids), r.block_size, model_revision, format FROM requests AS r "
        "JOIN sources USING (source_id) ORDER BY timestamp_s",
    )
    assert len(rows) == 9
    for row, i in zip(rows, ok, strict=True):
        tokens = src["input_lens"][i]
        assert row[0].endswith(f":1:{i}") and row[0].startswith("bench.")
        assert row[1:4] == (1, src["start_times"][i], tokens)
        assert row[4] == pytest.approx(1000 * src["ttfts"][i])
        assert row[5:] == (
            src["output_lens"][i],
            math.ceil(tokens / BLOCK_SIZE),
            BLOCK_SIZE,
            "Qwen/Qwen3-0.6B",
            "vllm_bench",
        )
    rejects = db_rows(db, "SELECT path, line_no, field, reason FROM rejects")
    assert len(rejects) == 1
    path, line, field, reason = rejects[0]
    assert (Path(path).name, line, field) == ("bench.json", 1, f"errors[{FAILED}]")
    assert reason == (
        "the request failed: aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected"
    )
    assert f"rejected {tmp_path / 'bench.json'}:1: errors[{FAILED}]: {reason}\n" in res.output


def test_the_random_prefix_is_shared_and_nothing_else(tmp_path, db):
    ingest([_copy(tmp_path)], db_path=db)
    ids = [r[0] for r in db_rows(db, "SELECT block_hash_ids FROM requests ORDER BY line_no")]
    assert len({tuple(h[:PREFIX_BLOCKS]) for h in ids}) == 1
    rest = [b for h in ids for b in h[PREFIX_BLOCKS:]]
    assert len(rest) == len(set(rest)) and not set(rest) & set(ids[0][:PREFIX_BLOCKS])


def test_without_a_prefix_no_block_is_shared(tmp_path, db):
    result = _result()
    del result["random_prefix_len"]
    ingest([_copy(tmp_path, result)], db_path=db)
    ids = [b for (h,) in db_rows(db, "SELECT block_hash_ids FROM requests") for b in h]
    assert len(ids) == len(set(ids))


def test_an_integer_prefix_longer_than_a_prompt(tmp_path, db):
    result = _result()
    result["random_prefix_len"] = 100  # 6 whole blocks; request 3 has 77 tokens (4 whole)
    ingest([_copy(tmp_path, result)], db_path=db)
    ids = dict(db_rows(db, "SELECT prompt_tokens, block_hash_ids FROM requests"))
    short, long = ids[77], ids[968]
    assert short[:4] == long[:4] and short[4] not in long


def test_lists_of_different_lengths_are_a_file_error(tmp_path, db):
    result = _result()
    result["ttfts"].pop()
    path = _copy(tmp_path, result)
    # Unequal lists are not auto-detected (see test_detection): the format is named.
    res = CliRunner().invoke(cli, ["ingest", "--db", str(db), str(path), "--format", "vllm_bench"])
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if "ttfts" in line]
    assert len(lines) == 1
    assert f"{path}:1: ttfts: 9 entries, but input_lens has 10" in lines[0]
    assert db_rows(db, "SELECT count(*) FROM requests") == [(0,)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"start_times": None}, "start_times: missing"),
        ({"errors": "none"}, "errors: string, not a list"),
        ({"random_prefix_len": "many"}, "random_prefix_len: expected a non-negative integer"),
    ],
)
def test_other_malformed_results(tmp_path, change, message):
    result = {**_result(), **change}
    path = _copy(tmp_path, result)
    with pytest.raises(InputFileError, match=message):
        ingest([path], db_path=tmp_path / "x.duckdb", fmt="vllm_bench")


def test_bad_entries_are_rejected_with_their_list_and_index(tmp_path, db):
    result = _result()
    result["ttfts"][1] = None
    result["input_lens"][2] = 0
    res = _ingest_cli(db, _copy(tmp_path, result))
    assert res.exit_code == 0, res.output
    assert db_rows(db, "SELECT field FROM rejects ORDER BY field") == [
        ("errors[4]",),
        ("input_lens[2]",),
        ("ttfts[1]",),
    ]


def test_a_result_with_nan_stores_every_request_it_can(tmp_path, db):
    """vllm bench writes its result with Python's json, which writes NaN (a mean of no
    values; a TTFT it could not measure), and orjson refuses NaN: the whole file was an
    error. Now a summary's NaN changes nothing and a request's rejects it alone."""
    result = _result()
    result["ttfts"][1] = math.nan
    result["std_itl_ms"] = math.nan
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(result) + "\n")
    assert "NaN" in path.read_text()
    res = _ingest_cli(db, path)
    assert res.exit_code == 0, res.output
    assert "read 10 = stored 8 + rejected 2" in res.output
    assert db_rows(db, "SELECT field, reason FROM rejects ORDER BY field") == [
        (f"errors[{FAILED}]", "the request failed: aiohttp.client_exceptions."
         "ServerDisconnectedError: Server disconnected"),
        ("ttfts[1]", "expected non-negative seconds, got nan"),
    ]  # fmt: skip


def test_detection(tmp_path):
    assert detect_format(_copy(tmp_path)) == "vllm_bench"
    no_suffix = _copy(tmp_path, name="bench_result")
    assert detect_format(no_suffix) == "vllm_bench"
    result = _result()
    result["ttfts"].pop()  # unequal lists: still a bench result, whose reader names the list
    odd = _copy(tmp_path, result, "odd.json")
    assert detect_format(odd) == "vllm_bench"
    out = CliRunner().invoke(cli, ["ingest", str(odd), "--db", str(tmp_path / "o.duckdb")])
    assert out.exit_code != 0 and "ttfts: 9 entries, but input_lens has 10" in out.output
    # A result longer than the MiB detection decodes is recognised by its keys.
    big = _result()
    big["generated_texts"] = ["x" * 4096] * 300
    assert detect_format(_copy(tmp_path, big, "big.json")) == "vllm_bench"


def test_calibrate_fits_the_linear_step(tmp_path, db):
    assert _ingest_cli(db, _copy(tmp_path)).exit_code == 0
    res = CliRunner().invoke(
        cli,
        ["calibrate", "--db", str(db), "--policy", "vllm-concurrent"]
        + ["--set", f"block_size={BLOCK_SIZE}"],
    )
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("fitted step_base_ms=") and "step_token_us=" in lines[0]
    assert lines[1].startswith("quality over 9 requests with ttft_ms: R^2 ")
