"""The SGLang server-log adapter: Finish lines (text and JSON), rejects, detection, CLI."""

from __future__ import annotations

import re
import shutil
from datetime import datetime
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import InputFileError
from analyzer.pipeline.match import match_prefixes
from analyzer.store.ingest import ingest
from analyzer.traces.adapters import sglang_log
from analyzer.traces.adapters.logs import LogStats
from analyzer.traces.readers import detect_format
from tests.conftest import db_rows

FIXTURE = Path(__file__).parents[2] / "fixtures" / "external" / "sglang_log" / "sglang_server.log"
MODEL = "Qwen/Qwen3-Next-80B-A3B-Instruct"


def _line(n: int) -> str:
    return FIXTURE.read_text().splitlines()[n - 1]


def _last(n: int, pattern: str):
    """The last match on fixture line n: meta_info comes last, whatever the text says."""
    return orjson.loads(re.findall(pattern, _line(n))[-1])


def _at(stamp: str) -> float:
    return datetime.fromisoformat(f"2025-11-29T{stamp}+00:00").timestamp()


def test_stored_values_and_rejects_of_the_fixture(tmp_path, db):
    path = shutil.copy(FIXTURE, tmp_path / FIXTURE.name)
    src = ingest([path], db_path=db, fmt="sglang_log").sources[0]
    assert (src.format, src.num_read, src.num_stored, src.num_rejected) == ("sglang_log", 7, 3, 4)
    rows = db_rows(
        db,
        "SELECT request_id, line_no, timestamp_s, prompt_token_ids, prompt_tokens, "
        "cached_tokens, output_token_ids, output_tokens, model_revision, lora_name "
        "FROM requests ORDER BY line_no",
    )
    a_ids, b_ids = _last(7, r"input_ids=(\[[^\]]*\])"), _last(10, r"input_ids=(\[[^\]]*\])")
    a_out, b_out = _last(7, r"'output_ids': (\[[^\]]*\])"), _last(10, r"'output_ids': (\[[^\]]*\])")
    json_line = orjson.loads(_line(17))
    assert rows == [
        # Receive line at 14:03:10 dates it (Finish at 14:03:12).
        ("8e1f0c2d4b6a48f09c3d5e7f1a2b3c4d", 7, _at("14:03:10"), a_ids, 48,
         _last(7, r"'cached_tokens': (\d+)"), a_out, 12, MODEL, "sql-adapter"),
        # No Receive line: Finish at 14:03:31 minus e2e_latency 1.25 s.
        ("b7c6d5e4f3a2419080706050403020aa", 10, _at("14:03:29.75"), b_ids, 74, 48, b_out, 8,
         MODEL, "sql-adapter"),
        ("j-0001", 17, _at("14:05:00.25"), json_line["obj"]["input_ids"], 44, 32,
         json_line["out"]["output_ids"], 3, MODEL, None),
    ]  # fmt: skip
    assert "'cached_tokens': 999" in _line(10)  # the output text quotes a decoy
    reasons = [(r.line_no, r.field, r.reason) for r in src.rejects]
    assert reasons == [
        (11, "input_ids", "the token list is cut in the log (its middle is replaced by ' ... ')"),
        (12, "input_ids", sglang_log._NOT_LOGGED),
        (13, "out", "a string literal is cut off (the log line was truncated)"),
        (14, "prompt_tokens", "300 but prompt_token_ids has 44"),
    ]
    sources = db_rows(db, "SELECT format, block_size, provenance FROM sources")
    assert sources[0][:2] == ("sglang_log", None) and "sglang" in sources[0][2]


def test_every_line_is_counted_and_turns_share(tmp_path, db):
    path = shutil.copy(FIXTURE, tmp_path / FIXTURE.name)
    stats = LogStats()
    with open(path, "rb") as f:
        batches = list(sglang_log.read_sglang_log(path, f, lambda: None, stats))
    assert sum(b.num_read for b in batches) == stats.num_request_lines == 7
    assert stats.num_request_lines + stats.num_skipped == len(FIXTURE.read_text().splitlines())
    ingest([path], db_path=db)
    match_prefixes(db, backend="numpy")
    shared = db_rows(
        db,
        "SELECT request_id, shared_any_tokens FROM prefix_matches ORDER BY request_id",
    )
    # The second turn carries the first turn's prompt (48) and output (12).
    assert dict(shared)["b7c6d5e4f3a2419080706050403020aa"] == 60


_OBJ = "GenerateReqInput(text=None, input_ids={ids}, rid={rid}, stream=False, lora_path=None)"
_OUT = "{{'text': 'ok', 'output_ids': {out}, 'meta_info': {{'id': 'm', {meta}}}}}"


def _finish(ids="[1, 2, 3]", rid="'r1'", out="[9]", meta="'prompt_tokens': 3, 'cached_tokens': 1"):
    return (
        f"[2025-11-29 10:00:00] Finish: obj={_OBJ.format(ids=ids, rid=rid)}, "
        f"out={_OUT.format(out=out, meta=meta + ', ' + repr('completion_tokens') + ': 1')}"
    )


def test_unusual_finish_lines(tmp_path, db):
    lines = [
        _finish(),
        _finish(rid="'r2'", meta="'prompt_tokens': 3, 'cached_tokens': 4"),
        _finish(rid="'r3'", ids="[[1, 2], [3]]"),
        _finish(rid="['r4', 'r5']"),
        _finish(rid="'r6'", ids="__import__('os').getcwd()"),
        _finish(rid="'r7'", out="[9, 10]"),  # 2 output ids for completion_tokens 1
        _finish(rid="'r8'", meta="'prompt_tokens': 3, 'cached_tokens': 'many'"),
        _finish(rid="None"),  # falls back to meta_info.id
        _finish(rid="'r9'").replace("text=None", """text='{"event": "request.finished"}'"""),
        # The Finish line of releases before v0.4 (default dataclass and dict reprs).
        "[2024-09-01 10:00:01] in=GenerateReqInput(text=None, input_ids=[5, 6], image_data=None, "
        "sampling_params={'max_new_tokens': 1}, rid='old1', return_logprob=False, stream=False), "
        "out={'text': 'x', 'meta_info': {'prompt_tokens': 2, 'completion_tokens': 1, "
        "'completion_tokens_wo_jump_forward': 1, 'cached_tokens': 1, 'finish_reason': "
        "'FINISH_LENGTH: 1', 'id': 'old1'}, 'index': 0}",
    ]
    path = tmp_path / "odd.log"
    path.write_text("\n".join(lines) + "\n")
    src = ingest([path], db_path=db).sources[0]
    assert src.format == "sglang_log"
    reasons = {r.line_no: f"{r.field}: {r.reason}" for r in src.rejects}
    assert reasons == {
        2: "cached_tokens: 4 is more than prompt_tokens (3)",
        3: "input_ids: not a list of integers: \"[[1, 2], [3]], rid='r3', stream=False, l\"",
        4: "rid: expected one request id (a string), got ['r4', 'r5']",
        5: "input_ids: expected a list of token ids, got \"__import__('os').get\"",
        7: "meta_info.cached_tokens: expected an integer, got \"'many'\"",
    }
    rows = db_rows(
        db, "SELECT request_id, output_token_ids, output_tokens FROM requests ORDER BY line_no"
    )
    assert rows == [
        ("r1", [9], 1),
        ("r7", None, 1),
        ("m", [9], 1),
        ("r9", [9], 1),
        ("old1", None, 1),
    ]
    assert db_rows(db, "SELECT cached_tokens FROM requests WHERE request_id = 'old1'") == [(1,)]


def test_detection_and_the_cli(tmp_path, db):
    path = shutil.copy(FIXTURE, tmp_path / "server.log")
    assert detect_format(path) == "sglang_log"
    json_only = tmp_path / "host_0.log"  # --log-requests-target DIR writes JSON lines only
    json_only.write_text(_line(16) + "\n" + _line(17) + "\n")
    assert detect_format(json_only) == "sglang_log"
    res = CliRunner().invoke(cli, ["ingest", "--db", str(db), str(path)])
    assert res.exit_code == 1
    assert f"{path}: read 7 = stored 3 + rejected 4 (166 prompt tokens; 10 " in res.output
    assert f"rejected {path}:14: prompt_tokens: 300 but prompt_token_ids has 44\n" in res.output
    res = CliRunner().invoke(
        cli,
        ["ingest", "--db", str(tmp_path / "j.duckdb"), str(json_only), "--format", "sglang_log"],
    )
    assert res.exit_code == 0, res.output
    assert "read 1 = stored 1 + rejected 0 (44 prompt tokens" in res.output


def test_a_json_finish_line_with_a_nan_names_the_field(tmp_path, db):
    """Python's json writes NaN, which orjson refuses: the line was 'malformed JSON'."""
    path = tmp_path / "host_0.log"
    finished = _line(17).replace('"e2e_latency": 0.5', '"e2e_latency": NaN')
    assert finished != _line(17)
    path.write_text(_line(16) + "\n" + finished + "\n")
    src = ingest([path], db_path=db, fmt="sglang_log").sources[0]
    assert (src.num_read, src.num_stored, src.num_rejected) == (1, 0, 1)
    assert [(r.line_no, r.field, r.reason) for r in src.rejects] == [
        (2, "out.meta_info.e2e_latency", "NaN is not a finite number")
    ]


def test_a_log_without_finish_lines_is_a_one_line_error(tmp_path, db):
    quiet = tmp_path / "quiet.log"
    quiet.write_text(_line(1) + "\n" + _line(2) + "\n")
    with pytest.raises(InputFileError, match=r"no SGLang request lines .* --log-requests\?"):
        ingest([quiet], db_path=db, fmt="sglang_log")
    assert db_rows(db, "SELECT count(*) FROM sources") == [(0,)]


def _without_line_14(path: Path) -> Path:
    """The fixture without its one invalid record (which sends a batch to the exact path)."""
    lines = FIXTURE.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:13] + lines[14:]))
    return path


def test_the_vectorised_path_stores_what_the_exact_path_stores(tmp_path, monkeypatch):
    from analyzer.traces.adapters import logs

    query = "SELECT * EXCLUDE (arrival_seq, source_id) FROM requests ORDER BY line_no"
    fast = tmp_path / "fast.duckdb"
    real, results = logs.fast_rows, []
    monkeypatch.setattr(logs, "fast_rows", lambda t, n: results.append(real(t, n)) or results[-1])
    ingest([_without_line_14(tmp_path / "a.log")], db_path=fast)
    assert results and None not in results  # the records took the vectorised path
    monkeypatch.setattr(logs, "fast_rows", lambda table, line_nos: None)
    exact = tmp_path / "exact.duckdb"
    ingest([_without_line_14(tmp_path / "b.log")], db_path=exact)
    assert db_rows(fast, query) == db_rows(exact, query)
    assert len(db_rows(fast, query)) == 3


S0523 = FIXTURE.parent / "sglang0523_server.log"


def test_sglang_0523_lines_as_its_request_logger_writes_them(tmp_path, db):
    """Issue 49 item 1. tests/fixtures/external/sglang_log/sglang0523_server.log is written
    by SGLang 0.5.23's own RequestLogger on real GenerateReqInputs at --log-requests-level 3
    (tools/oracle/make_log_fixtures.py): `Receive: obj=GenerateReqInput(rid=.., ..)` and
    `Finish: obj=GenerateReqInput(..), out={'text': .., 'output_ids': [..], 'meta_info':
    {..}}` (python/sglang/srt/utils/request_logger.py:116 and :197, its
    `_dataclass_to_string_truncated` at :273, the `[%(asctime)s] %(message)s` format of
    utils/log_utils.py:54), and the `server_args={'model_path': ..}` line of
    srt/entrypoints/engine.py:311 (before: the model was not read from it). A request
    finished twice is one reject naming the first; one sent as text (no ids) another."""
    path = shutil.copy(S0523, tmp_path / S0523.name)
    src = ingest([path], db_path=db).sources[0]
    assert (src.format, src.num_read, src.num_stored, src.num_rejected) == ("sglang_log", 5, 3, 2)
    rows = db_rows(
        db,
        "SELECT request_id, line_no, timestamp_s, prompt_token_ids, output_token_ids, "
        "cached_tokens, model_revision FROM requests ORDER BY line_no",
    )

    def at(n):  # the request's Receive line, one line before its Finish line
        return datetime.fromisoformat(f"{_line_of(n - 1)[1:20]}+00:00").timestamp()

    def _line_of(n):
        return S0523.read_text().splitlines()[n - 1]

    def ids(n, pattern):
        return orjson.loads(re.findall(pattern, _line_of(n))[-1])

    inputs, outputs = r"input_ids=(\[[^\]]*\])", r"'output_ids': (\[[^\]]*\])"
    model = "Qwen/Qwen3-0.6B"
    assert rows == [
        ("a1", 3, at(3), ids(3, inputs), ids(3, outputs), 0, model),
        ("a2", 5, at(5), ids(5, inputs), ids(5, outputs), 52, model),
        ("twice", 7, at(7), ids(7, inputs), ids(7, outputs), 0, model),
    ]
    assert rows[1][3][:52] == rows[0][3] + rows[0][4]  # turn 2 holds turn 1 and its output
    assert [(r.line_no, r.field, r.reason) for r in src.rejects] == [
        (8, "request_id", "duplicate 'twice', first seen at line 7"),
        (10, "input_ids", "not logged (None): --log-requests-level 0/1 omit input_ids and a "
         "request sent as text has none; log ids with --log-requests-level 3"),
    ]  # fmt: skip
