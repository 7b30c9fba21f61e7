"""A trace without token ids or block hashes is refused in one line that says why prefix
analysis needs them and what to bring instead (issue 49 item 4)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.traces.records import NO_IDS_WHY
from tests.conftest import db_rows

AZURE = (
    Path(__file__).parents[1]
    / "fixtures/external/azure_llm_2023/AzureLLMInferenceTrace_conv_head.csv"
)
WHY = (
    "prefix analysis needs what each prompt holds, token by token (prompt_token_ids) or block "
    "by block (block_hash_ids with block_size): counts cannot tell whether two prompts share "
    "a prefix; bring the token ids or block hashes, or the prompts' text as a chat or "
    "completion log with --tokenizer (docs/traces.md#from-your-logs-to-a-trace)"
)
COUNTS = '{"request_id": "%s", "timestamp": %d, "prompt_tokens": 374, "output_tokens": 44}\n'


@pytest.mark.parametrize(
    ("name", "content", "error"),
    [
        # The Azure 2023 trace: before, "the CSV header must name request_id and each column
        # once, got [...]" (true, but not why such a trace cannot be used).
        ("azure.csv", None, "{path}:1: no column holds token ids or block hashes (got "
         "['TIMESTAMP', 'ContextTokens', 'GeneratedTokens']): " + WHY),
        ("counts.csv", "request_id,timestamp,prompt_tokens\na,1,374\nb,2,396\n",
         "{path}:1: no column holds token ids or block hashes (got ['request_id', "
         "'timestamp', 'prompt_tokens']): " + WHY),
        # Before: two rejects 'prompt_token_ids: missing (...)' and 'is it a trace of another
        # format?'.
        ("counts.jsonl", "".join(COUNTS % (f"r{i}", i) for i in range(2)),
         "{path}: none of its 2 records has token ids or block hashes: " + WHY),
    ],
)  # fmt: skip
def test_a_trace_without_ids_is_refused(tmp_path, db, name, content, error):
    path = tmp_path / name
    if content is None:
        shutil.copy(AZURE, path)
    else:
        path.write_text(content)
    result = CliRunner().invoke(cli, ["ingest", "--db", str(db), str(path)])
    assert result.exit_code == 2
    assert result.output == "Error: " + error.format(path=path) + "\n"
    assert not db.exists() or db_rows(db, "SELECT count(*) FROM requests") == [(0,)]


def test_one_record_with_ids_is_enough_to_store_the_rest_as_rejects(tmp_path, db):
    """The refusal is for a file of which no record has ids or hashes: a trace where some
    lack them stores the others and lists these as rejects."""
    path = tmp_path / "mixed.jsonl"
    path.write_text(COUNTS % ("a", 1) + '{"request_id": "b", "prompt_token_ids": [1, 2]}\n')
    result = CliRunner().invoke(cli, ["ingest", "--db", str(db), str(path), "--allow-rejects"])
    assert result.exit_code == 0, result.output
    assert "read 2 = stored 1 + rejected 1" in result.output
    assert NO_IDS_WHY not in result.output
