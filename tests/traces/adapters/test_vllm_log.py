"""The vLLM server-log adapter: the logged formats, rejects, time stamps, detection, CLI."""

from __future__ import annotations

import gzip
import os
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import InputFileError
from analyzer.store.ingest import ingest
from analyzer.traces.adapters import vllm_log
from analyzer.traces.adapters.logs import LogStats
from analyzer.traces.readers import detect_format
from tests.conftest import db_rows

FIXTURE = Path(__file__).parents[2] / "fixtures" / "external" / "vllm_log" / "vllm_server.log"
WRITTEN = datetime(2026, 11, 29, 15, 0, tzinfo=UTC)  # the log's modification time
OLD, NEW = "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen3-Next-80B-A3B-Instruct"


def _copy(tmp_path: Path, name: str = "vllm_server.log", text: str | None = None) -> Path:
    path = tmp_path / name
    if text is None:
        shutil.copy(FIXTURE, path)
    else:
        path.write_text(text)
    os.utime(path, (WRITTEN.timestamp(), WRITTEN.timestamp()))
    return path


def _ids(line_no: int, label: str) -> list[int]:
    """The last `label: [..]` list of a fixture line (a prompt may quote an earlier one)."""
    line = FIXTURE.read_text().splitlines()[line_no - 1]
    return orjson.loads(re.findall(label + r": (\[[^\]]*\])", line)[-1])


def _at(clock: str) -> float:
    return datetime.fromisoformat(f"2026-11-29T{clock}+00:00").timestamp()


def test_stored_values_and_rejects_of_the_fixture(tmp_path, db):
    src = ingest([_copy(tmp_path)], db_path=db, fmt="vllm_log").sources[0]
    assert (src.format, src.num_read, src.num_stored, src.num_rejected) == ("vllm_log", 7, 4, 3)
    rows = db_rows(
        db,
        "SELECT request_id, line_no, timestamp_s, prompt_token_ids, output_token_ids, "
        "output_tokens, model_revision, lora_name, cached_tokens FROM requests ORDER BY line_no",
    )
    assert rows == [
        ("chat-6f1c2a4be0b34e0a9d8c1f2e3a4b5c6d", 6, _at("14:03:12"), _ids(6, "prompt_token_ids"),
         None, None, OLD, None, None),
        ("cmpl-9a8b7c6d5e4f40318273645546372819-0", 9, _at("14:03:15"),
         _ids(9, "prompt_token_ids"), None, None, OLD, "sql-adapter", None),
        ("chatcmpl-4c1d2e3f", 15, _at("14:12:40"), _ids(15, "prompt_token_ids"),
         _ids(18, "output_token_ids"), 12, NEW, "chat-v2", None),
        ("chatcmpl-7a8b9c0d", 20, _at("14:12:55"), _ids(20, "prompt_token_ids"),
         None, None, NEW, "chat-v2", None),
    ]  # fmt: skip
    assert [(r.line_no, r.field) for r in src.rejects] == [(11, "prompt_token_ids")] * 1 + [
        (12, "prompt_token_ids"),
        (25, "prompt_token_ids"),
    ]
    reasons = [r.reason for r in src.rejects]
    assert reasons[0] == "the token list is cut off (no closing ']'; the log line was truncated)"
    assert reasons[1].startswith("None in the log")
    assert reasons[2].startswith("not logged: vLLM >= 0.11.2 logs prompt token ids only at DEBUG")
    assert db_rows(db, "SELECT format, block_size FROM sources") == [("vllm_log", None)]


def test_every_line_is_counted(tmp_path):
    path = _copy(tmp_path)
    stats = LogStats()
    with open(path, "rb") as f:
        batches = list(vllm_log.read_vllm_log(path, f, lambda: None, stats))
    assert sum(b.num_read for b in batches) == stats.num_request_lines == 7
    assert stats.num_request_lines + stats.num_skipped == 26  # every line of the file
    assert sum(b.num_skipped for b in batches) == stats.num_skipped == 19

    # The second turn shares the first turn's prompt and output (its output ids were logged).
    rows = [row for b in batches for row in b.rows.to_pylist()]
    first, second = (r for r in rows if r["request_id"].startswith("chatcmpl-"))
    carried = first["prompt_token_ids"] + first["output_token_ids"]
    assert second["prompt_token_ids"][: len(carried)] == carried


def test_skipped_lines_are_reported_and_stored(tmp_path, db):
    path = _copy(tmp_path)
    res = CliRunner().invoke(cli, ["ingest", "--db", str(db), str(path), "--allow-rejects"])
    assert res.exit_code == 0, res.output
    assert (
        "read 7 = stored 4 + rejected 3 (182 prompt tokens; 19 other lines skipped)" in res.output
    )
    assert db_rows(db, "SELECT num_read, num_skipped FROM sources") == [(7, 19)]


def _line(rid: str, clock: str, ids: str, level: str = "INFO", day: str = "11-29") -> str:
    return (
        f"{level} {day} {clock} logger.py:37] Received request {rid}: prompt: 'x', "
        f"params: SamplingParams(n=1, stop=['prompt_token_ids: [9]']), prompt_token_ids: {ids}, "
        "lora_request: None, prompt_adapter_request: None."
    )


def test_year_comes_from_the_modification_time_and_rolls_over(tmp_path, db):
    text = "\n".join(
        [
            _line("a", "23:59:58", "[1, 2]", day="12-31"),
            _line("b", "00:00:01", "[1, 2, 3]", day="01-01"),
            _line("c", "00:00:00", "[4]", day="12-31"),  # a late line from before midnight
        ]
    )
    path = tmp_path / "newyear.log"
    path.write_text(text + "\n")
    written = datetime(2027, 1, 1, 0, 5, tzinfo=UTC).timestamp()
    os.utime(path, (written, written))
    ingest([path], db_path=db)
    stamps = db_rows(db, "SELECT request_id, timestamp_s FROM requests ORDER BY line_no")
    assert [(rid, datetime.fromtimestamp(t, UTC).isoformat()) for rid, t in stamps] == [
        ("a", "2026-12-31T23:59:58+00:00"),
        ("b", "2027-01-01T00:00:01+00:00"),
        ("c", "2026-12-31T00:00:00+00:00"),
    ]
    assert db_rows(db, "SELECT request_id FROM requests ORDER BY arrival_seq") == [
        ("c",),
        ("a",),
        ("b",),
    ]


def test_outputs_wait_only_a_window_of_lines(tmp_path, db, monkeypatch):
    monkeypatch.setattr(vllm_log, "WINDOW_LINES", 2)
    output = (
        "INFO 11-29 14:00:09 logger.py:71] Generated response {}: output: 'ok', "
        "output_token_ids: [7, 8], finish_reason: stop"
    )
    lines = [_line("near", "14:00:00", "[1]"), output.format("near")]
    lines += [_line("far", "14:00:01", "[2]"), "noise", "noise", "noise", output.format("far")]
    ingest([_copy(tmp_path, "w.log", "\n".join(lines) + "\n")], db_path=db)
    assert db_rows(db, "SELECT request_id, output_token_ids FROM requests ORDER BY line_no") == [
        ("near", [7, 8]),
        ("far", None),
    ]


def test_unparseable_token_lists_are_rejects_never_evaluated(tmp_path, db):
    lines = [
        _line("ok", "14:00:00", "[1, 2]"),
        _line("float", "14:00:01", "[1, 2.5]"),
        _line("code", "14:00:02", "__import__('os').system('false')"),
        _line("nested", "14:00:03", "[[1], [2]]"),
        _line("neg", "14:00:04", "[-3]"),
        "INFO 11-29 14:00:05 logger.py:37] Received request cut: prompt: 'never clo",
    ]
    src = ingest([_copy(tmp_path, "bad.log", "\n".join(lines))], db_path=db).sources[0]
    assert (src.num_read, src.num_stored, src.num_rejected) == (6, 1, 5)
    reasons = {r.line_no: f"{r.field}: {r.reason}" for r in src.rejects}
    assert reasons == {
        2: "prompt_token_ids[1]: expected an integer, got number",
        3: "prompt_token_ids: expected a list of token ids, got \"__import__('os').sys\"",
        4: "prompt_token_ids: not a list of integers: '[[1], [2]], lora_request: None, prompt_a'",
        5: "prompt_token_ids[0]: -3 is outside [0, 2^31)",
        6: "prompt_token_ids: the log line is cut off inside the prompt text",
    }


def test_detection_cli_and_compressed_logs(tmp_path, db):
    path = _copy(tmp_path, "server.log")
    assert detect_format(path) == "vllm_log"
    packed = tmp_path / "server2.log.gz"
    packed.write_bytes(
        gzip.compress(
            FIXTURE.read_bytes().replace(b"cmpl-", b"cmpl2-").replace(b"chat-", b"chat2-"), mtime=0
        )
    )
    assert detect_format(packed) == "vllm_log"
    res = CliRunner().invoke(cli, ["ingest", "--db", str(db), str(path), str(packed)])
    assert res.exit_code == 1, res.output
    assert f"{path}: read 7 = stored 4 + rejected 3 (182 prompt tokens; 19 " in res.output
    assert (
        f"rejected {path}:11: prompt_token_ids: the token list is cut off (no closing ']'; "
        "the log line was truncated)\n" in res.output
    )
    assert f"{packed}: read 7 = stored 4 + rejected 3" in res.output
    res = CliRunner().invoke(
        cli,
        ["ingest", "--db", str(tmp_path / "x.duckdb"), str(path), "--allow-rejects"]
        + ["--format", "vllm_log"],
    )
    assert res.exit_code == 0, res.output
    assert "read 7 = stored 4 + rejected 3" in res.output


def test_a_log_without_request_lines_is_a_one_line_error(tmp_path, db):
    quiet = _copy(tmp_path, "quiet.log", "INFO 11-29 14:00:01 api_server.py:528] vLLM API\n")
    with pytest.raises(InputFileError, match="no vLLM request lines .* --enable-log-requests"):
        ingest([quiet], db_path=db, fmt="vllm_log")
    assert db_rows(db, "SELECT count(*) FROM sources") == [(0,)]
    res = CliRunner().invoke(cli, ["ingest", "--db", str(db), str(quiet)])
    assert res.exit_code == 2
    assert res.output.count("\n") == 1 and "cannot tell the format" in res.output
    res = CliRunner().invoke(cli, ["ingest", "--db", str(db), str(quiet), "--format", "vllm_log"])
    assert res.exit_code == 2
    assert res.output.count("\n") == 1 and "--enable-log-requests?" in res.output


def test_the_vectorised_path_stores_what_the_exact_path_stores(tmp_path, monkeypatch):
    from analyzer.traces.adapters import logs

    query = "SELECT * EXCLUDE (arrival_seq, source_id) FROM requests ORDER BY line_no"
    fast = tmp_path / "fast.duckdb"
    real, results = logs.fast_rows, []
    monkeypatch.setattr(logs, "fast_rows", lambda t, n: results.append(real(t, n)) or results[-1])
    ingest([_copy(tmp_path)], db_path=fast, fmt="vllm_log")
    assert results and None not in results  # the records took the vectorised path
    monkeypatch.setattr(logs, "fast_rows", lambda table, line_nos: None)
    exact = tmp_path / "exact.duckdb"
    ingest([_copy(tmp_path, "again.log")], db_path=exact, fmt="vllm_log")
    assert db_rows(fast, query) == db_rows(exact, query)
    assert len(db_rows(fast, query)) == 4


def test_a_rejected_details_line_and_its_info_line_are_one_request(tmp_path, db):
    lines = [
        "DEBUG 11-29 14:00:00 [logger.py:40] Request r1 details: prompt: 'x', "
        "prompt_token_ids: [1, 2, 3",
        "INFO 11-29 14:00:00 [logger.py:47] Received request r1: params: SamplingParams(n=1), "
        "lora_request: None.",
    ]
    path = _copy(tmp_path, "cut.log", "\n".join(lines) + "\n")
    stats = LogStats()
    with open(path, "rb") as f:
        batches = list(vllm_log.read_vllm_log(path, f, lambda: None, stats))
    assert (stats.num_request_lines, stats.num_skipped) == (1, 1)
    assert [(r.line_no, r.field) for b in batches for r in b.rejects] == [(1, "prompt_token_ids")]


def test_a_message_quoted_in_a_text_is_not_a_message(tmp_path, db):
    quoted = "Received request z: prompt: None, prompt_token_ids: [5]"
    lines = [
        _line("a", "14:00:00", "[1, 2]"),
        f"INFO 11-29 14:00:01 [logger.py:71] Generated response a: output: '{quoted}', "
        "output_token_ids: [3], finish_reason: stop",
    ]
    src = ingest([_copy(tmp_path, "q.log", "\n".join(lines) + "\n")], db_path=db).sources[0]
    assert (src.num_read, src.num_stored) == (1, 1)
    assert db_rows(db, "SELECT request_id, output_token_ids FROM requests") == [("a", [3])]


@pytest.mark.parametrize(
    ("day", "clock", "reason"),
    [
        ("13-45", "25:61:99", "log header '13-45 25:61:99' is not a date and time"),
        ("11-29", "24:00:00", "log header '11-29 24:00:00' is not a date and time"),
        ("02-30", "10:00:00", "log header '02-30 10:00:00': no such day"),
    ],
)
def test_a_header_that_is_no_date_rejects_its_line(tmp_path, db, day, clock, reason):
    """Item 11: such a line was stored with a NULL timestamp (and its month confused the
    year tracking of the lines after it)."""
    text = "\n".join(
        [
            _line("a", "10:00:00", "[1, 2]", day="11-28"),
            _line("b", clock, "[1, 2, 3]", day=day),
            _line("c", "10:00:01", "[4]", day="11-28"),
        ]
    )
    result = ingest([_copy(tmp_path, "bad.log", text + "\n")], db_path=db)
    assert (result.num_stored, result.num_rejected) == (2, 1)
    assert db_rows(db, "SELECT line_no, field, reason FROM rejects") == [(2, "timestamp", reason)]
    stamps = db_rows(db, "SELECT request_id, timestamp_s FROM requests ORDER BY line_no")
    assert [(rid, datetime.fromtimestamp(t, UTC).isoformat()) for rid, t in stamps] == [
        ("a", "2026-11-28T10:00:00+00:00"),
        ("c", "2026-11-28T10:00:01+00:00"),
    ]


def test_a_request_id_with_spaces_is_read_whole(tmp_path, db):
    """(issue 13, item 11: an X-Request-Id with a space made the line not match: skipped)"""
    text = "\n".join(
        [
            _line("cmpl-1 retry 2", "10:00:00", "[1, 2]"),
            "INFO 11-29 10:00:01 logger.py:40] Generated response cmpl-1 retry 2: output: 'y', "
            "output_token_ids: [7, 8], finish_reason: stop",
            _line("plain", "10:00:02", "[3]"),
        ]
    )
    path = tmp_path / "spaces.log"
    path.write_text(text + "\n")
    src = ingest([path], db_path=db, fmt="vllm_log").sources[0]
    assert (src.num_read, src.num_stored) == (2, 2)
    assert db_rows(db, "SELECT request_id, output_token_ids FROM requests ORDER BY line_no") == [
        ("cmpl-1 retry 2", [7, 8]),
        ("plain", None),
    ]


V033 = FIXTURE.parent / "vllm033_server.log"
V033_WRITTEN = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)


def _v033(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    os.utime(path, (V033_WRITTEN.timestamp(), V033_WRITTEN.timestamp()))
    return path


def _v033_ids(line_no: int, label: str) -> list[int]:
    line = V033.read_text().splitlines()[line_no - 1]
    return orjson.loads(re.findall(label + r": (\[[^\]]*\])", line)[-1])


def test_vllm_033_lines_prompts_and_both_output_lines_joined(tmp_path, db):
    """Issue 49 item 1. tests/fixtures/external/vllm_log/vllm033_server.log is written by
    vLLM 0.33.0's own RequestLogger (tools/oracle/make_log_fixtures.py): log_inputs'
    DEBUG `Request ID details: prompt: .., prompt_token_ids: [..], prompt_embeds shape: ..`
    and INFO `Received request ID: params: ..` (vllm/entrypoints/serve/utils/
    request_logger.py:56 and :66), log_outputs' DEBUG `Generated response ID details:
    output_token_ids: [..]` and INFO `Generated response ID: output: '..', finish_reason:
    ..` (:112 and :119), vllm/logger.py's `(APIServer pid=N) LEVEL MM-DD HH:MM:SS
    [file:line]` header. Before, the outputs were lost: the INFO line has no ids and the
    DEBUG line counted among the lines skipped."""
    path = _v033(tmp_path, "v033.log", V033.read_text())
    src = ingest([path], db_path=db).sources[0]
    assert (src.format, src.num_read, src.num_stored, src.num_rejected) == ("vllm_log", 7, 5, 2)
    rows = db_rows(
        db,
        "SELECT request_id, line_no, prompt_token_ids, output_token_ids, model_revision, "
        "lora_name FROM requests ORDER BY line_no",
    )
    model = "Qwen/Qwen3-0.6B"
    assert rows == [
        ("chatcmpl-a1", 3, _v033_ids(3, "prompt_token_ids"), _v033_ids(5, "output_token_ids"),
         model, None),
        ("cmpl-b-0", 7, _v033_ids(7, "prompt_token_ids"), _v033_ids(9, "output_token_ids"),
         model, "sql-adapter"),
        ("chatcmpl-a2", 11, _v033_ids(11, "prompt_token_ids"),
         _v033_ids(13, "output_token_ids"), model, None),
        ("chatcmpl-s", 15, _v033_ids(15, "prompt_token_ids"), None, model, None),  # streamed
        ("chatcmpl-twice", 21, _v033_ids(21, "prompt_token_ids"),
         _v033_ids(25, "output_token_ids"), model, None),
    ]  # fmt: skip
    first, second = rows[0], rows[2]
    assert second[2][: len(first[2]) + len(first[3])] == first[2] + first[3]  # turn 2 holds 1
    assert [(r.line_no, r.field, r.reason) for r in src.rejects] == [
        (19, "prompt_token_ids", "missing: an output line of a request with no prompt line in "
         "the 100,000 lines before it (the log starts after its request, or prompts were not "
         "logged)"),
        (23, "request_id", "duplicate 'chatcmpl-twice': the request was logged twice (first at "
         "line 21)"),
    ]  # fmt: skip
    assert db_rows(db, "SELECT num_skipped FROM sources") == [(19,)]


def test_an_output_without_its_prompt_is_one_reject_per_request(tmp_path, db):
    """The DEBUG and INFO output lines of a request whose prompt is not in the log, and an
    INFO-only request's output lines: one reject each, never one per line."""
    lines = V033.read_text().splitlines()
    gone = [n for n, line in enumerate(lines) if "chatcmpl-gone" in line]
    info_only = [line for line in lines if "chatcmpl-a1" in line and "details:" not in line]
    path = _v033(tmp_path, "o.log", "\n".join([lines[n] for n in gone] + info_only) + "\n")
    src = ingest([path], db_path=db, fmt="vllm_log").sources[0]
    assert (src.num_read, src.num_stored) == (2, 0)
    assert [(r.line_no, r.reason[:40]) for r in src.rejects] == [
        (1, "missing: an output line of a request wit"),
        (3, "not logged: vLLM >= 0.11.2 logs prompt t"),
    ]


CUT = FIXTURE.parent / "vllm033_max_log_len.log"  # --max-log-len 512: six prompts cut
WHOLE = FIXTURE.parent / "vllm033_fixed_len.log"  # six whole prompts of exactly 512 ids


def _without_args(path: Path) -> str:
    return "".join(line for line in path.read_text().splitlines(True) if "args: " not in line)


@pytest.mark.parametrize(
    ("text", "cut_at"),
    [
        (CUT.read_text(), 512),  # the args line names max_log_len 512
        (_without_args(CUT), 512),  # no args line: six prompts of 512 ids, 512 characters
        ("".join(CUT.read_text().splitlines(True)[:9]), 512),  # two cut prompts, args line
        ("".join(_without_args(CUT).splitlines(True)[:8]), None),  # two: fewer than MIN_CUT
        (WHOLE.read_text(), None),  # the args line names no max_log_len: nothing was cut
        (_without_args(WHOLE), None),  # fixed-length prompts whose text is whole
        (V033.read_text(), None),
        (FIXTURE.read_text(), None),  # vLLM 0.6's `args: Namespace(.., max_log_len=None)`
        (FIXTURE.read_text().replace("max_log_len=None", "max_log_len=48"), 48),
    ],
)
def test_a_log_that_cuts_its_lists_is_found(tmp_path, text, cut_at):
    """Issue 49 item 2: the log's own args line when it has one (vLLM 0.33's `non-default
    args: {.., 'max_log_len': 512}`, entrypoints/common/startup.py:96; older releases'
    `args: Namespace(.., max_log_len=N)`), else at least MIN_CUT prompts at the longest
    length whose text is cut at the same length (vLLM cuts text and ids at one N,
    request_logger.py:49-54). Fixed-length prompts of whole text raise no alarm."""
    path = _v033(tmp_path, "cut.log", text)
    with open(path, "rb") as f:
        batches = list(vllm_log.read_vllm_log(path, f, lambda: None))
    assert [b.cut_at_tokens for b in batches][-1] == cut_at
    assert all(b.cut_at_tokens is None for b in batches[:-1])


CUT_SAID = (
    "warning: {path}: 6 prompts may be cut at 512 tokens (the log cuts its token lists "
    "there: vLLM's --max-log-len): their shared prefixes are a lower bound; stored with "
    "log_cut_tokens = 512 (--reject-truncated rejects them)\n"
)
CUT_NOTE = (
    "note: 6 prompts may be cut at 512 tokens (a server log's --max-log-len): their shared "
    "prefixes are a lower bound (docs/traces.md#cut-logs)\n"
)


def test_cut_prompts_are_flagged_and_match_and_replay_say_so(tmp_path, db):
    """Before: six prompts of exactly 512 tokens stored without a word, and match reported
    83.3% shared (their true prompts are 1,573 to 1,939 tokens, 1,201 of them shared)."""
    path = _v033(tmp_path, "cut.log", CUT.read_text())
    runner = CliRunner()
    res = runner.invoke(cli, ["ingest", "--db", str(db), str(path)])
    assert res.exit_code == 0, res.output
    assert CUT_SAID.format(path=path) in res.output
    assert db_rows(db, "SELECT count(*), min(log_cut_tokens) FROM requests") == [(6, 512)]
    res = runner.invoke(cli, ["match", "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert "shared with any earlier request: 83.3% of prompt tokens" in res.output
    assert res.output.endswith(CUT_NOTE)
    res = runner.invoke(cli, ["replay", "--db", str(db), "--set", "block_size=16"])
    assert res.exit_code == 0, res.output
    assert res.output.endswith(CUT_NOTE)

    whole = tmp_path / "whole.duckdb"
    log = _v033(tmp_path, "w.log", WHOLE.read_text())
    res = runner.invoke(cli, ["ingest", "--db", str(whole), str(log)])
    assert res.exit_code == 0 and "may be cut" not in res.output, res.output
    res = runner.invoke(cli, ["match", "--db", str(whole)])
    assert res.exit_code == 0 and "note:" not in res.output, res.output


def test_reject_truncated_rejects_the_cut_prompts(tmp_path, db):
    path = _v033(tmp_path, "cut.log", CUT.read_text())
    res = CliRunner().invoke(cli, ["ingest", "--db", str(db), str(path), "--reject-truncated"])
    assert res.exit_code == 1, res.output
    assert f"{path}: read 6 = stored 0 + rejected 6 (0 prompt tokens; 19 other" in res.output
    assert (
        f"  rejected {path}:2: prompt_token_ids: 512 ids, where this log cuts its token lists "
        "(vLLM's --max-log-len): the prompt may be longer (--reject-truncated)\n"
    ) in res.output
    assert res.output.endswith(
        f"warning: {path}: 6 prompts of exactly 512 tokens rejected: the log cuts its token "
        "lists at 512 (vLLM's --max-log-len), so they may be longer\n"
    )
    assert "is it a trace of another format" not in res.output
    assert db_rows(db, "SELECT count(*) FROM requests") == [(0,)]
    assert db_rows(db, "SELECT num_stored, num_rejected, num_prompt_tokens FROM sources") == [
        (0, 6, 0)
    ]
