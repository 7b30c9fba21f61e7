"""The command line: exact messages and exit codes for every bad-input case of ingest/query."""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.words import plural
from tests.conftest import write_jsonl


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def every_update(monkeypatch):
    """Progress lines from the start, one per count, and no heartbeat (exact stderr)."""
    from analyzer.cli import base

    monkeypatch.setattr(base, "PROGRESS_QUIET_S", 0.0)
    monkeypatch.setattr(base, "PROGRESS_LINE_S", 0.0)
    monkeypatch.setattr(base, "PROGRESS_HEARTBEAT_S", 1e9)


def test_ingest_then_query(tmp_path, db):
    path = write_jsonl(tmp_path / "t.jsonl", [{"request_id": "a", "prompt_token_ids": [1, 2]}])
    result = run("ingest", path, "--db", db)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{path}: read 1 = stored 1 + rejected 0 (2 prompt tokens)\n"
    again = run("ingest", path, "--db", db)
    assert again.exit_code == 0
    assert again.stdout.startswith(f"{path}: identical to source 1 (sha256 ")
    assert again.stdout.endswith("), nothing added\n")
    out = run(
        "query", "SELECT request_id, prompt_tokens FROM requests", "--db", db, "--format", "csv"
    )
    assert (out.exit_code, out.stdout) == (0, "request_id,prompt_tokens\na,2\n")
    out = run(
        "query", "SELECT request_id, prompt_token_ids FROM requests", "--db", db, "--format", "json"
    )
    assert out.stdout == '{"request_id":"a","prompt_token_ids":[1,2]}\n'


def test_query_json_writes_integers_past_64_bits_exactly(tmp_path, db):
    path = write_jsonl(tmp_path / "t.jsonl", [{"request_id": "a", "prompt_token_ids": [1, 2]}])
    assert run("ingest", path, "--db", db).exit_code == 0
    sql = (
        "SELECT 1::UHUGEINT << 100 AS x, [2::HUGEINT << 70, NULL] AS l, 'nan'::DOUBLE AS n, "
        "{'a': 'inf'::DOUBLE} AS s, 'é' AS t, 12.5::DECIMAL(10, 2) AS d"
    )
    out = run("query", sql, "--db", db, "--format", "json")
    assert (out.exit_code, out.stdout) == (
        0,
        f'{{"x":{1 << 100},"l":[{2 << 70},null],"n":null,"s":{{"a":null}},"t":"é","d":12.5}}\n',
    )
    sum_of_hashes = run("query", "SELECT sum(hash(i)) AS h FROM range(4) t(i)", "--db", db,
                        "--format", "json")  # fmt: skip
    assert sum_of_hashes.exit_code == 0 and int(sum_of_hashes.stdout.split(":")[1][:-2]) > 0


def test_an_empty_file_is_a_warning_and_alone_exit_1(tmp_path, db):
    """(issue 33 item 8: an empty file ingested with exit 0 and no word)"""
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    alone = run("ingest", empty, "--db", db)
    assert alone.exit_code == 1
    assert alone.stdout == f"{empty}: read 0 = stored 0 + rejected 0 (0 prompt tokens)\n"
    assert alone.stderr == (
        f"warning: {empty}: no records (an empty file)\n"
        "ingest: no file held a record; nothing stored\n"
    )
    other = write_jsonl(tmp_path / "t.jsonl", [{"request_id": "a", "prompt_token_ids": [1]}])
    beside = run("ingest", empty, other, "--db", tmp_path / "two.duckdb")
    assert beside.exit_code == 0
    assert beside.stderr == f"warning: {empty}: no records (an empty file)\n"


WEKA = Path(__file__).parent / "fixtures" / "external" / "weka_claude_code"


def test_a_folder_ingest_notes_once_and_counts_progress_over_every_file(tmp_path, db, monkeypatch):
    """(issue 33 item 6: the adapter's note after every file; progress from 0 at each)"""
    every_update(monkeypatch)
    result = run("ingest", WEKA, "--db", db)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and notes[0].startswith("note: timestamps of 49 requests (weka)")
    lines = result.stderr.splitlines()
    done = [float(line.split()[1]) for line in lines]
    totals = {line.split()[3] for line in lines}
    files = len(list(WEKA.glob("*.gz")))
    assert lines[-1].endswith(f" MiB (file {files} of {files})")
    total_mib = sum(f.stat().st_size for f in WEKA.glob("*.gz")) / 2**20
    assert done == sorted(done) and totals == {f"{total_mib:,.1f}"}
    assert done[-1] == float(f"{total_mib:.1f}")


BAD_RECORDS = [
    (
        '{"request_id": "a", "prompt_token_ids": [1]}\n'
        '{"request_id": "a", "prompt_token_ids": [2]}',
        2,
        "request_id: duplicate 'a', first seen at line 1",
    ),
    (
        '{"request_id": "a", "prompt_token_ids": [1]\n{"request_id": "b", "prompt_token_ids": [2]}',
        1,
        "malformed JSON (unexpected end of data: line 1 column 44 (char 43))",
    ),
    ('{"request_id": 5, "prompt_token_ids": [1]}', 1, "request_id: expected a string, got integer"),
    (
        '{"request_id": "a", "prompt_token_ids": [1, "x"]}',
        1,
        "prompt_token_ids[1]: expected an integer, got string",
    ),
    (
        '{"request_id": "a", "prompt_token_ids": [1, -2]}',
        1,
        "prompt_token_ids[1]: -2 is outside [0, 2^31)",
    ),
    (
        '{"request_id": "a", "prompt_token_ids": [2147483648]}',
        1,
        "prompt_token_ids[0]: 2147483648 is outside [0, 2^31)",
    ),
    (
        '{"request_id": "a", "prompt_token_ids": []}',
        1,
        "prompt_token_ids: empty array (a request needs at least one token)",
    ),
    (  # (a file of no record with ids is refused whole: test_a_trace_without_ids_is_refused)
        '{"request_id": "b", "prompt_token_ids": [1]}\n'
        '{"request_id": "a", "output_token_ids": [1]}',
        2,
        "prompt_token_ids: missing (give prompt_token_ids, or block_hash_ids with block_size)",
    ),
    (
        '{"request_id": "a", "block_hash_ids": [1, 2]}',
        1,
        "block_size: missing (required with block_hash_ids)",
    ),
]


@pytest.mark.parametrize(("text", "line", "message"), BAD_RECORDS)
def test_bad_record_is_listed_with_file_line_field(tmp_path, db, text, line, message):
    path = tmp_path / "t.jsonl"
    path.write_text(text + "\n")
    result = run("ingest", path, "--db", db)
    assert result.exit_code == 1
    assert f"  rejected {path}:{line}: {message}\n" in result.stderr
    assert "Traceback" not in result.output
    lines = text.count("\n") + 1
    assert result.stdout == (
        f"{path}: read {lines} = stored {lines - 1} + rejected 1 "
        f"({plural(lines - 1, 'prompt token')})\n"
    )
    assert run("ingest", path, "--db", db, "--allow-rejects").exit_code == 0


def test_duplicate_across_files_names_the_first(tmp_path, db):
    one = write_jsonl(tmp_path / "1.jsonl", [{"request_id": "a", "prompt_token_ids": [1]}])
    two = write_jsonl(tmp_path / "2.jsonl", [{"request_id": "a", "prompt_token_ids": [1, 2]}])
    result = run("ingest", one, two, "--db", db)
    assert result.exit_code == 1
    assert (
        f"  rejected {two}:1: request_id: duplicate 'a', first seen at {one}:1\n" in result.stderr
    )
    assert result.stdout.endswith("total: read 2 = stored 1 + rejected 1\n")


def test_many_rejects_are_summarised(tmp_path, db):
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [{"request_id": f"r{i}", "prompt_token_ids": []} for i in range(25)]
        + [{"request_id": "ok", "prompt_token_ids": [1]}],
    )
    result = run("ingest", path, "--db", db)
    assert result.exit_code == 1
    assert result.stderr.count("  rejected ") == 20
    assert (
        '  ... and 5 more: hpa query "SELECT * FROM rejects WHERE source_id = 1"\n' in result.stderr
    )


FILE_ERRORS = [
    ("missing.jsonl", None, "Error: {path}: no such file\n"),
    ("garbage.jsonl", b"\x00\x01binary\n", "Error: {path}: not JSON Lines (line 1: malformed JSON"),
    (
        "t.jsonl.gz",
        gzip.compress(b'{"request_id": "a", "prompt_token_ids": [1]}\n' * 500)[:60],
        "Error: {path}: cannot be read in line 1 (byte 23 of its decompressed content) "
        "(Compressed file ended before the "
        "end-of-stream marker was reached)\n",
    ),
    ("t.parquet", b"PAR1 not really", "Error: {path}: not a readable Parquet file ("),
    (
        "t.csv",
        b"id,prompt_token_ids\nx,1\n",
        "Error: {path}:1: the CSV header must name request_id and each column once, "
        "got ['id', 'prompt_token_ids']\n",
    ),
    (
        "t.json",
        b'[{"request_id": "a"}]\n',
        "Error: {path}: a JSON array, not JSON Lines (one object per line); "
        "convert it first, e.g. jq -c '.[]'\n",
    ),
    (
        "t.bin",
        b"\x89PNG....",
        "Error: {path}: cannot tell the format from the name or content; "
        "pass --format (jsonl, parquet, csv)\n",
    ),
]


@pytest.mark.parametrize(("name", "content", "message"), FILE_ERRORS)
def test_unreadable_file_is_one_line_and_exit_2(tmp_path, db, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    result = run("ingest", path, "--db", db)
    assert result.exit_code == 2
    assert result.stderr.startswith(message.format(path=path))
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output


def test_bad_format_option(tmp_path, db):
    result = run("ingest", tmp_path / "x", "--format", "xml", "--db", db)
    assert result.exit_code == 2
    assert "Invalid value for '--format': 'xml' is not one of" in result.stderr


def test_query_errors(tmp_path, db):
    result = run("query", "SELECT 1", "--db", tmp_path / "none.duckdb")
    assert (result.exit_code, result.stderr) == (
        1,
        f"Error: {tmp_path / 'none.duckdb'}: no such database; run `hpa ingest FILE "
        f"--db {tmp_path / 'none.duckdb'}` first\n",
    )
    path = write_jsonl(tmp_path / "t.jsonl", [{"request_id": "a", "prompt_token_ids": [1]}])
    run("ingest", path, "--db", db)
    result = run("query", "SELECT nope FROM requests", "--db", db)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: query failed: Binder Error: Referenced column")


def test_every_command_has_help():
    for name, command in cli.commands.items():
        assert command.help, name
        assert run(name, "--help").exit_code == 0


def test_progress_on_a_pipe_is_a_line_now_and_then(tmp_path, monkeypatch):
    """(issue 14, item 8: piped, a long sweep printed nothing until it finished)"""
    from pathlib import Path

    from analyzer.cli import base

    db = tmp_path / "p.duckdb"
    sample = Path(__file__).parent.parent / "sample_traces" / "groups_1500.jsonl"
    assert run("ingest", sample, "--db", db).exit_code == 0
    monkeypatch.setattr(base, "PROGRESS_QUIET_S", 10.0)
    quick = run("sweep", "--db", db, "--set", "block_size=64", "--vary", "num_blocks=100,200")
    assert quick.exit_code == 0 and quick.stderr == ""  # done within 10 s: no line at all
    every_update(monkeypatch)  # every step is "long enough"
    slow = run("sweep", "--db", db, "--set", "block_size=64", "--vary", "num_blocks=100,200")
    assert slow.exit_code == 0
    assert slow.stderr.splitlines() == ["sweep: 1 of 2 points", "sweep: 2 of 2 points"]


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_help_and_version_import_no_store_and_no_arrays(args):
    """Answered in a tenth of a second: neither DuckDB, pyarrow, numpy nor numba loads."""
    code = (
        "import sys\n"
        "from analyzer.cli import cli\n"
        f"cli.main({args!r}, standalone_mode=False)\n"
        "print([m for m in ('duckdb', 'pyarrow', 'numpy', 'numba') if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_hash_id_traces_of_two_block_sizes_are_named_at_ingest_and_replay(tmp_path, db):
    """(issue 33 item 7: they landed in one store without a word, and the replay matched
    both in one unit)"""
    small = write_jsonl(tmp_path / "small.jsonl", [
        {"request_id": f"s{i}", "block_hash_ids": [1, 2, 3 + i], "block_size": 16,
         "prompt_tokens": 48} for i in range(3)
    ])  # fmt: skip
    big = write_jsonl(tmp_path / "big.jsonl", [
        {"request_id": f"b{i}", "block_hash_ids": [7, 8 + i], "block_size": 512,
         "prompt_tokens": 1024} for i in range(2)
    ])  # fmt: skip
    assert run("ingest", small, "--db", db).stderr == ""
    second = run("ingest", big, "--db", db)
    said = (
        f"hash-id traces of 2 block sizes are stored: 16-token blocks ({small}: 3 requests); "
        f"512-token blocks ({big}: 2 requests). They never share a prefix, and a replay "
        "matches them all in 512-token units (the least common multiple), coarser than the "
        "16-token trace's own blocks: ingest each into its own --db to replay it at its own size"
    )
    assert second.exit_code == 0 and second.stderr == f"warning: {said}\n"
    replay = run("replay", "--db", db, "--policy", "vllm-dense", "--set",
                 'groups=["full_attention"]', "--set", "block_size=16")  # fmt: skip
    assert replay.exit_code == 0, replay.output
    assert f"note: {said}\n" in replay.stdout


@pytest.fixture(scope="module")
def replayed_db(tmp_path_factory) -> Path:
    """The groups sample ingested and replayed once (run 1), one database per module."""
    db = tmp_path_factory.mktemp("replayed") / "r.duckdb"
    sample = Path(__file__).parent.parent / "sample_traces" / "groups_1500.jsonl"
    assert run("ingest", sample, "--db", db).exit_code == 0
    assert run("replay", "--db", db, "--set", "model=qwen3.5-4b").exit_code == 0
    return db


MODEL = ["--set", "model=qwen3.5-4b"]
# Every command that writes a file it is given: (arguments before the path, after it)
WRITERS = [
    (["report", "-o"], []),
    (["query", "SELECT 1", "--out"], []),
    (["match", "--out"], []),
    (["replay", *MODEL, "--out"], []),
    (["metrics", "--out"], []),
    (["validate", "--out"], []),
    (["calibrate", *MODEL, "--out"], []),
]


@pytest.mark.parametrize(("before", "after"), WRITERS, ids=[w[0][0] for w in WRITERS])
def test_a_file_in_a_missing_folder_is_refused_and_no_folder_made(
    replayed_db, tmp_path, before, after
):
    """(issue 47 item 10: `hpa report -o /nonexistent/dir/r.html` made the folders)"""
    out = tmp_path / "missing" / "dir" / "out.csv"
    result = run(*before, out, *after, "--db", replayed_db)
    assert (result.exit_code, result.stderr) == (
        2,
        f"Error: --out {out}: no such folder {out.parent}; make it first\n",
    )
    assert not (tmp_path / "missing").exists()


def test_synth_and_probe_make_no_folder_above_theirs(tmp_path):
    out = tmp_path / "missing" / "t.jsonl"
    synth = run("synth", out, "--num-requests", "3")
    assert (synth.exit_code, synth.stderr) == (
        2,
        f"Error: {out}: no such folder {out.parent}; make it first\n",
    )
    folder = tmp_path / "missing" / "probe"
    probe = run("probe", *MODEL, "--out", folder)
    assert (probe.exit_code, probe.stderr) == (
        2,
        f"Error: --out {folder}: no such folder {folder.parent}; make it first\n",
    )
    assert not (tmp_path / "missing").exists()
    made = run("probe", *MODEL, "--out", tmp_path / "probe")  # its own folder is made
    assert made.exit_code == 0 and (tmp_path / "probe" / "probe.jsonl").exists()


def test_query_prints_what_the_query_returned(db):
    """(issue 47 item 11: round(x, 5) printed as 0.926, and 0.92651 the same as 0.92649
    to the eye)"""
    sql = "SELECT round(x, 5) AS r, x FROM (VALUES (0.926492::DOUBLE), (0.92651), (0.5)) t(x)"
    result = run("query", sql, "--db", db)
    assert (result.exit_code, result.stdout) == (
        0,
        "      r         x\n"
        "-------  --------\n"
        "0.92649  0.926492\n"
        "0.92651  0.926510\n"
        "0.50000  0.500000\n",
    )


UNKNOWN_COLUMNS = [
    # (issue 47 item 12: DuckDB's "column not found" named none of the stored columns)
    (
        "SELECT min(timestamp) FROM requests",
        'Referenced column "timestamp" not found in FROM clause! '
        "(closest stored columns: requests.timestamp_s)",
    ),
    (
        "SELECT timestmp FROM requests JOIN replay_requests USING (request_id)",
        'Referenced column "timestmp" not found in FROM clause! '
        "(closest stored columns: replay_requests.timestamp_s, requests.timestamp_s)",
    ),
    (
        "SELECT r.hit_token FROM replay_requests r",
        'Table "r" does not have a column named "hit_token" (closest stored columns: '
        "replay_requests.hit_tokens, replay_requests.host_hit_tokens, "
        "replay_requests.first_token_s)",
    ),
    (
        "SELECT run FROM replay_summary",
        'Referenced column "run" not found in FROM clause! '
        "(closest stored columns: replay_summary.run_id)",
    ),
    (
        "SELECT foo FROM requests",
        'Referenced column "foo" not found in FROM clause! '
        "(no stored column is close to 'foo'; `DESCRIBE requests` lists its columns)",
    ),
]


@pytest.mark.parametrize(("sql", "message"), UNKNOWN_COLUMNS)
def test_an_unknown_column_names_the_closest_stored_ones(replayed_db, sql, message):
    result = run("query", sql, "--db", replayed_db)
    assert (result.exit_code, result.stderr) == (
        1,
        f"Error: query failed: Binder Error: {message}\n",
    )


def test_match_on_a_pipe_counts_requests(tmp_path, monkeypatch):
    """(issue 47 item 13: `hpa match` printed no progress at all on a pipe)"""
    db = tmp_path / "m.duckdb"
    sample = Path(__file__).parent.parent / "sample_traces" / "groups_1500.jsonl"
    assert run("ingest", sample, "--db", db).exit_code == 0
    every_update(monkeypatch)
    result = run("match", "--db", db)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-1] == "match: 32 of 32 requests"


def test_a_long_step_still_prints_a_line_every_few_seconds(monkeypatch):
    """(issue 47 item 13: one long replay of a plan left 32 s without a line)"""
    import io
    import time

    from analyzer.cli import base

    monkeypatch.setattr(base, "PROGRESS_QUIET_S", 0.0)
    monkeypatch.setattr(base, "PROGRESS_LINE_S", 0.0)
    monkeypatch.setattr(base, "PROGRESS_HEARTBEAT_S", 0.05)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    with base.counter("plan", "replays") as update:
        update(3, "search: num_blocks=40")
        time.sleep(0.4)  # one long replay, no count
        update(4, end=True)  # the end: the count the answer says, however soon
    with base.progress_bar("match", "requests") as update:
        update(10, 20)
        time.sleep(0.4)
        update(20, 20)
    with base.heartbeat("report"):
        time.sleep(0.4)
    lines = err.getvalue().splitlines()
    plan = [line for line in lines if line.startswith("plan: ")]
    assert plan[0] == "plan: 3 replays, 0 s: search: num_blocks=40"
    assert len(plan) >= 4 and all(
        re.fullmatch(r"plan: 3 replays, \d+ s: search: num_blocks=40", line) for line in plan[:-1]
    )
    assert re.fullmatch(r"plan: 4 replays, \d+ s", plan[-1])
    match = [line for line in lines if line.startswith("match: ")]
    assert match[0] == "match: 10 of 20 requests" and match[-1] == "match: 20 of 20 requests"
    assert len(match) >= 4 and all(
        re.fullmatch(r"match: 10 of 20 requests, \d+ s so far", line) for line in match[1:-1]
    )
    report = [line for line in lines if line.startswith("report: ")]
    assert len(report) >= 2 and all(re.fullmatch(r"report: \d+ s so far", x) for x in report)


HELP = "(hpa replay --help lists every key)"
UNKNOWN_KEYS = [
    # (issue 47 item 14: an unknown key listed all 60 keys, and suggested none)
    (["replay", "--set", "replica=2"], "--set 'replica=2': unknown policy key 'replica'; "
     f"did you mean 'replicas'? {HELP}"),
    (["replay", "--set", "step_base=2"], "--set 'step_base=2': unknown policy key "
     f"'step_base'; did you mean 'step_base_ms'? {HELP}"),
    (["replay", "--set", "routng=dynamo"], "--set 'routng=dynamo': unknown policy key "
     f"'routng'; did you mean 'routing'? {HELP}"),
    (["replay", "--set", "llmd_kv_weigth=1"], "--set 'llmd_kv_weigth=1': unknown policy key "
     f"'llmd_kv_weigth'; did you mean 'llmd_kv_weight'? {HELP}"),
    (["sweep", "--vary", "num_block=1,2"], "--vary 'num_block=1,2': unknown policy key "
     f"'num_block'; did you mean 'num_blocks'? {HELP}"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "message"), UNKNOWN_KEYS)
def test_an_unknown_policy_key_suggests_the_closest(tmp_path, args, message):
    result = run(*args, "--db", tmp_path / "none.duckdb")
    assert (result.exit_code, result.stderr) == (2, f"Error: {message}\n")


def test_replay_help_lists_every_policy_key_grouped_with_its_default():
    """(issue 47 item 14: `hpa replay --help` listed no policy key)"""
    from analyzer.config.policy import KEYS

    text = run("replay", "--help").stdout
    keys = text[text.index("Policy keys (--set KEY=VALUE") :]
    flat = " ".join(keys.split())
    for key in KEYS:
        assert re.search(rf"(?<![\w-]){re.escape(key)}=", flat), key
    for line in (
        "fleet: replicas=1, routing=trace",
        "schedule: schedule=serial, max_num_batched_tokens=8192 (or the gpu's)",
        "concurrent clock: max_num_seqs=256 (or the gpu's), step_base_ms=5.0, "
        "step_token_us=100.0, time_scale=1.0, async_scheduling=true",
        "marconi only: marconi_alpha=1.0, marconi_bootstrap=5",
        "every live router: router_seed=0, router_refresh_s=0.0",
    ):
        assert line in flat, line


@pytest.mark.parametrize(
    ("big", "said"),
    [
        # (issue 47 item 17: "warning: 1 requests could not be scheduled")
        (1, "warning: 1 request could not be scheduled at all (num_blocks 4 is too small for "
            "it); see replay_requests.error\n"),
        (2, "warning: 2 requests could not be scheduled at all (num_blocks 4 is too small for "
            "them); see replay_requests.error\n"),
    ],
)  # fmt: skip
def test_counts_are_said_with_the_plural_rule(tmp_path, db, big, said):
    records = [{"request_id": "small", "prompt_token_ids": list(range(16))}]
    records += [{"request_id": f"big{i}", "prompt_token_ids": list(range(200))} for i in range(big)]
    path = write_jsonl(tmp_path / "t.jsonl", records)
    assert run("ingest", path, "--db", db).exit_code == 0
    dense = ["--policy", "vllm-dense", "--set", 'groups=["full_attention"]']
    result = run("replay", "--db", db, *dense, "--set", "block_size=16", "--set", "num_blocks=4")
    assert result.exit_code == 0, result.output
    assert result.stderr == said
    assert f"run 1: {plural(1 + big, 'request')} replayed in " in result.stdout
    one = write_jsonl(tmp_path / "one.jsonl", [{"request_id": "a", "prompt_token_ids": [7]}])
    ingested = run("ingest", one, "--db", tmp_path / "one.duckdb")
    assert ingested.stdout == f"{one}: read 1 = stored 1 + rejected 0 (1 prompt token)\n"
    synth = run("synth", tmp_path / "s.jsonl", "--num-requests", "1")
    assert synth.stdout.startswith("synth: 1 record, ")


def test_a_new_store_in_a_missing_folder_is_refused(tmp_path):
    """(issue 47 item 10, --db: DuckDB's "IO Error: Cannot open file" before)"""
    sample = Path(__file__).parent.parent / "sample_traces" / "groups_1500.jsonl"
    db = tmp_path / "missing" / "t.duckdb"
    result = run("ingest", sample, "--db", db)
    assert (result.exit_code, result.stderr) == (
        2,
        f"Error: --db {db}: no such folder {db.parent}; make it first\n",
    )
    assert not db.parent.exists()


def test_an_unknown_key_in_a_policy_file_names_the_file(tmp_path):
    policy = tmp_path / "p.json"
    policy.write_text('{"block_size": 544, "replica": 2}\n')
    result = run("replay", "--policy", policy, "--db", tmp_path / "none.duckdb")
    assert (result.exit_code, result.stderr) == (
        2,
        f"Error: policy {policy}: unknown policy key 'replica'; did you mean 'replicas'? {HELP}\n",
    )


# A bad option or argument that click finds is one line too, exit code 2 (click printed the
# usage line, 'Try ... for help.' and a blank line before its error); a group given no
# command still shows its help.
@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["match", "--workers", "0"],
         "Error: Invalid value for '--workers': 0 is not in the range x>=1. ('hpa match --help' "
         "for help)"),
        (["plan"],
         "Error: Missing option '--target-useful-hit-ratio'. ('hpa plan --help' for help)"),
        (["model", "show"],
         "Error: Missing argument 'MODEL': a preset (nemotron-nano-9b-v2, qwen3-next-80b-a3b, "
         "qwen3.5-4b, qwen3.6-27b), a preset-layout .json or a Hugging Face config.json. ('hpa "
         "model show --help' for help)"),
        (["replay", "--nosuch"],
         "Error: No such option '--nosuch'. Did you mean '--out'? ('hpa replay --help' for help)"),
        (["frobnicate"], "Error: No such command 'frobnicate'. ('hpa --help' for help)"),
        (["--bogus"], "Error: No such option '--bogus'. ('hpa --help' for help)"),
    ],
)  # fmt: skip
def test_a_usage_error_is_one_line(args, line):
    result = CliRunner().invoke(cli, args, prog_name="hpa")
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", line + "\n")


def test_a_group_given_no_command_shows_its_help():
    result = CliRunner().invoke(cli, ["model"], prog_name="hpa")
    assert result.exit_code == 2 and result.output.startswith("Usage: hpa model [OPTIONS]")


def test_a_latency_plans_pool_columns_print_counts_as_the_other_tables_do():
    """`hpa plan --ttft-p99 --gpu` printed num_blocks and room_blocks as bare text ('1618',
    '4367', left-aligned) where the serial plan's table prints '23,056'; an unbounded
    fleet's pool stays 'null'."""
    from types import SimpleNamespace

    import pyarrow as pa

    from analyzer.cli.plan import _fleet_columns
    from analyzer.report.tables import render

    def fleet(blocks, room):
        return SimpleNamespace(
            total_gpus=6, tensor_parallel=2, replicas=3, routing="dynamo", num_blocks=blocks,
            room_blocks=room, cost=37.9, useful_hit_ratio=0.078, load=None, sized_by="ttft p99",
        )  # fmt: skip

    plan = SimpleNamespace(candidates=[fleet(1618, 4367), fleet(23056, 4367)], cost_unit="GiB")
    lines = render(pa.table(_fleet_columns(plan))).splitlines()
    assert lines[0].split()[4:6] == ["num_blocks", "room_blocks"]
    assert [line.split()[4:6] for line in lines[2:]] == [["1,618", "4,367"], ["23,056", "4,367"]]
    assert lines[2].index("1,618") + 5 == lines[3].index("23,056") + 6  # right-aligned
    unbounded = SimpleNamespace(candidates=[fleet(None, None)], cost_unit="GiB")
    assert render(pa.table(_fleet_columns(unbounded))).splitlines()[2].split()[4:6] == [
        "null",
        "null",
    ]


def test_a_plans_last_progress_line_counts_every_replay_the_answer_counts(tmp_path, monkeypatch):
    """The progress line came before each replay and none at the end: 'plan: 43 replays,
    10 s' last, where the answer said [46 replays] (docs/commands.md: 'and at the end')."""
    db = tmp_path / "p.duckdb"
    sample = Path(__file__).parent.parent / "sample_traces" / "groups_1500.jsonl"
    assert run("ingest", sample, "--db", db).exit_code == 0
    every_update(monkeypatch)
    result = run("plan", "--db", db, "--target-useful-hit-ratio", "0.3", "--set", "block_size=64")
    assert result.exit_code == 0, result.output
    replays = re.search(r"\[(\d+) replays", result.stdout)[1]
    last = [line for line in result.stderr.splitlines() if line.startswith("plan: ")][-1]
    assert re.fullmatch(rf"plan: {replays} replays, \d+ s", last), (last, replays)


LOAD = {
    "num_timed": 12_031,
    "ttft_p50_s": 6035.2184,
    "ttft_p90_s": 10861.5,
    "ttft_p99_s": 12003.25,
    "queue_mean_s": 5912.0,
    "queue_p99_s": 11990.125,
    "num_preemptions": 1200,
    "num_preempted_requests": 1100,
    "recomputed_tokens": 2_500_000,
    "in_flight_peak": 9700,
    "in_flight_mean": 4961.84,
    "held_blocks_peak": None,
    "queue_first_quarter_s": 40.25,
    "queue_last_quarter_s": 11000.5,
}


def test_the_load_line_prints_numbers_as_the_rest_of_the_tool():
    """(the Mooncake pass: 'in flight peak 9,700, mean 4961.8', TTFT p50 6035.218 s)"""
    from analyzer.cli.analysis import _load_line

    figures = {**LOAD, "queue_first_quarter_s": 0.5, "queue_last_quarter_s": 0.75}
    assert _load_line(figures) == (
        "load: TTFT p50 6,035.218 s, p90 10,861.500 s, p99 12,003.250 s; queue mean "
        "5,912.000 s, p99 11,990.125 s; 1,200 preemptions of 1,100 requests (2,500,000 tokens "
        "recomputed); in flight peak 9,700, mean 4,961.8"
    )


def test_a_saturated_replay_says_so_with_the_queue_times_that_show_it():
    """(the Mooncake pass: TTFT p50 6,035 s with the default step model, and no word that the
    queue grew without bound, where `hpa plan` has its `saturated` column)"""
    from analyzer.cli.analysis import _load_line

    assert _load_line({**LOAD, "held_blocks_peak": 4096, "saturated": True}) == (
        "load: TTFT p50 6,035.218 s, p90 10,861.500 s, p99 12,003.250 s; queue mean "
        "5,912.000 s, p99 11,990.125 s; 1,200 preemptions of 1,100 requests (2,500,000 tokens "
        "recomputed); in flight peak 9,700, mean 4,961.8; pool blocks in use at an admission: "
        "peak 4,096; saturated: the simulated server cannot keep up, the queue grows with the "
        "trace (the last quarter of arrivals queued 11,000.500 s on average, the first quarter "
        "40.250 s)"
    )
    assert "saturated" not in _load_line({**LOAD, "saturated": False})


def test_replay_shows_the_largest_families_and_says_how_to_see_them_all(tmp_path):
    """(the Mooncake pass: 2,212 derived families printed 2,217 lines, one a family)"""
    import orjson

    sample = Path(__file__).parent.parent / "sample_traces" / "groups_1600.jsonl"
    records = [orjson.loads(line) for line in sample.read_text().splitlines()]
    for i, r in enumerate(records):  # 32 families: f00..f31, the later ones longer
        r["prompt_family"] = f"f{i:02d}"
        r["prompt_token_ids"] = r["prompt_token_ids"] + list(range(900_000, 900_000 + i))
    db = tmp_path / "f.duckdb"
    assert run("ingest", write_jsonl(tmp_path / "f.jsonl", records), "--db", db).exit_code == 0
    result = run("replay", "--db", db, "--set", "block_size=528")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    rows = lines[2:22]
    assert [row.split()[0] for row in rows] == [f"f{i:02d}" for i in range(31, 11, -1)]
    hidden = [r for r in records if int(r["prompt_family"][1:]) < 12]
    queried = sum(len(r["prompt_token_ids"]) for r in hidden)
    assert lines[22] == (
        f"... and 12 more families x revisions ({queried:,} queried tokens): "
        'hpa query "SELECT * FROM replay_summary WHERE run_id = 1 ORDER BY prompt_tokens DESC, '
        'prompt_family, model_revision" lists every one'
    )
    assert lines[23].startswith("prompt tokens: ")  # over every family, the hidden ones too
    assert lines[24].startswith("run 1: 32 requests replayed in ")
    listed = run(
        "query",
        "--db",
        db,
        "SELECT * FROM replay_summary WHERE run_id = 1 ORDER BY "
        "prompt_tokens DESC, prompt_family, model_revision",
        "--format",
        "json",
    )
    assert listed.exit_code == 0
    assert [orjson.loads(x)["prompt_family"] for x in listed.stdout.splitlines()][:2] == [
        "f31",
        "f30",
    ]
    assert len(listed.stdout.splitlines()) == 32  # every one, one JSON object a line
