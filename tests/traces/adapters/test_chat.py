"""Chat and completion logs tokenized with the served model's tokenizer (hpa ingest
--tokenizer; analyzer.traces.text, analyzer.traces.adapters.chat).

The models are built in code (tests/traces/chat_helpers.py: a BPE tokenizer trained on a few
sentences, Qwen2.5's and Llama 3.2's real chat templates); their ids are checked against
transformers' apply_chat_template (tests/fixtures/chat_reference_ids.json, written by
tools/chat_reference/chat_reference_ids.py where transformers is installed)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import orjson
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import ConfigError
from analyzer.store.ingest import ingest
from analyzer.traces.readers import detect_format
from analyzer.traces.text import load
from tests.traces.chat_helpers import (
    CONVERSATIONS,
    MODELS,
    PROMPTS,
    REFERENCE,
    model_folder,
    template_kwargs,
)

REFERENCE_IDS = json.loads(REFERENCE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {name: model_folder(root, name) for name in MODELS}


@pytest.mark.parametrize("name", list(MODELS))
def test_the_ids_are_the_reference_librarys(models, name):
    reference = REFERENCE_IDS[name]
    raw = (models[name] / "tokenizer.json").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == reference["tokenizer_json_sha256"], (
        "the tokenizer trained in code changed (another tokenizers version?): run "
        "tools/chat_reference/chat_reference_ids.py again"
    )
    tokenizer = load(str(models[name]))
    texts = [
        tokenizer.render(c["messages"], c.get("tools"), template_kwargs(name))
        for c in CONVERSATIONS
    ]
    assert tokenizer.chat_ids(texts) == reference["chat_ids"]
    assert tokenizer.prompt_ids(PROMPTS) == reference["prompt_ids"]


def _line(**fields) -> bytes:
    return orjson.dumps(fields) + b"\n"


def _ingest(tmp_path, models, lines: list[bytes], name="qwen", **kwargs):
    log = tmp_path / "chat.jsonl"
    log.write_bytes(b"".join(lines))
    db = tmp_path / "chat.duckdb"
    result = ingest([log], db_path=db, tokenizer=str(models[name]), **kwargs)
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT request_id, timestamp_s, prompt_token_ids, cached_tokens, output_tokens, "
            "model_revision, conversation_id FROM requests ORDER BY line_no"
        ).fetchall()
        source = con.execute(
            "SELECT format, tokenizer, tokenizer_sha256, chat_template_sha256 FROM sources"
        ).fetchone()
    finally:
        con.close()
    return result.sources[0], rows, source


def test_every_shape_a_gateway_writes(tmp_path, models):
    ref = REFERENCE_IDS["llama"]
    conv, tools_conv = CONVERSATIONS[1], CONVERSATIONS[3]
    date = template_kwargs("llama")
    usage = {"completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 5}}
    lines = [
        # a request/response pair
        _line(
            request={"model": "m", "messages": conv["messages"], "chat_template_kwargs": date},
            response={"id": "chatcmpl-1", "created": 1700000000, "usage": usage},
        ),
        # LiteLLM's StandardLoggingPayload: tools in model_parameters
        _line(
            id="litellm-2",
            startTime=1700000001.5,
            model="m",
            messages=tools_conv["messages"],
            model_parameters={"tools": tools_conv["tools"]},
            response={"usage": {"prompt_tokens": len(ref["chat_ids"][3])}},
            chat_template_kwargs=date,
        ),
        # OpenAI batch lines: custom_id, body
        _line(
            custom_id="batch-3", body={"messages": conv["messages"], "chat_template_kwargs": date}
        ),
        # a completion log, the request body alone, with canonical fields kept
        _line(prompt=PROMPTS[0], conversation_id="c1", timestamp="2023-11-14T22:13:25Z"),
    ]
    src, rows, source = _ingest(tmp_path, models, lines, name="llama")
    assert (src.num_read, src.num_stored, src.num_rejected) == (4, 4, 0)
    scope = f"chat.{hashlib.sha256(b''.join(lines)).hexdigest()[:8]}"
    # LiteLLM's line is its own request body: its chat_template_kwargs are read from it
    assert rows == [
        ("chatcmpl-1", 1700000000.0, ref["chat_ids"][1], 5, 7, "m", None),
        ("litellm-2", 1700000001.5, ref["chat_ids"][3], None, None, "m", None),
        ("batch-3", None, ref["chat_ids"][1], None, None, None, None),
        (f"{scope}:4", 1700000005.0, ref["prompt_ids"][0], None, None, None, "c1"),
    ]
    sha = hashlib.sha256((models["llama"] / "tokenizer.json").read_bytes()).hexdigest()
    template = json.loads((models["llama"] / "tokenizer_config.json").read_text())["chat_template"]
    assert source == ("chat", "llama", sha, hashlib.sha256(template.encode()).hexdigest())


REFUSED = "messages: the chat template refused it: "
REJECTS = [
    (
        {"messages": [{"role": "user", "content": "hi"}], "usage": {"prompt_tokens": 3}},
        "usage.prompt_tokens",
        "3 but the tokenizer gives 57 tokens (is it the served model's tokenizer and chat "
        "template?)",
    ),
    ({"messages": []}, "messages", "empty array (a chat needs a message)"),
    ({"messages": "hi"}, "messages", "expected an array, got string"),
    (
        {"messages": ["hi"]},
        "messages",
        "a message is str, not an object",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        "messages",
        "a content part of type 'image_url': only text is tokenized here",
    ),
    ({"prompt": ""}, "prompt", "empty string (a request needs at least one token)"),
    ({"prompt": ["a", "b"]}, "prompt", "expected a string, got array (one request a line)"),
    ({"model": "m"}, "messages", "missing (a chat request's messages, or a completion's prompt)"),
    ({"prompt": "x", "id": 1.5}, "request_id", "expected a string, got number"),
    ({"prompt": "x", "usage": [1]}, "usage", "expected an object, got array"),
    (
        {"messages": [{"role": "user", "content": "x"}], "tools": {}},
        "tools",
        "expected an array, got object",
    ),
    (
        {"prompt": "The cache", "usage": {"prompt_tokens_details": {"cached_tokens": 99}}},
        "cached_tokens",
        "99 is more than prompt_tokens (3)",
    ),
]


@pytest.mark.parametrize(("record", "field", "reason"), REJECTS)
def test_rejects_name_the_field_and_why(tmp_path, models, record, field, reason):
    keep = _line(prompt=PROMPTS[0])
    src, rows, _ = _ingest(tmp_path, models, [keep, orjson.dumps(record) + b"\n"])
    assert (src.num_read, src.num_stored, src.num_rejected) == (2, 1, 1)
    assert [(r.line_no, r.field, r.reason) for r in src.rejects] == [(2, field, reason)]


def test_the_templates_own_refusal_is_a_reject(tmp_path, models):
    # Llama 3.2's template: raise_exception when tools go in a first user message there is not
    only_system = {
        "messages": [{"role": "system", "content": "s"}],
        "tools": CONVERSATIONS[3]["tools"],
    }
    src, _, _ = _ingest(tmp_path, models, [orjson.dumps(only_system) + b"\n"], name="llama")
    assert [(r.field, r.reason) for r in src.rejects] == [
        (
            "messages",
            "the chat template refused it: Cannot put tools in the first user message when "
            "there's no first user message!",
        )
    ]


def test_content_parts_are_joined_as_vllm_joins_them(models):
    tokenizer = load(str(models["qwen"]))
    parts = [{"type": "text", "text": "What is"}, {"type": "text", "text": "a block?"}]
    as_parts = tokenizer.render([{"role": "user", "content": parts}], None)
    as_text = tokenizer.render([{"role": "user", "content": "What is\na block?"}], None)
    assert as_parts == as_text


@pytest.mark.parametrize(
    ("first", "fmt"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "chat"),
        ({"request": {"messages": []}, "response": {}}, "chat"),
        ({"custom_id": "a", "body": {"messages": []}}, "chat"),
        ({"prompt": "x"}, "chat"),
        ({"prompt": "x", "prompt_token_ids": [1]}, "jsonl"),  # ids: the canonical format
        ({"request_id": "a", "prompt_token_ids": [1]}, "jsonl"),
    ],
)
def test_detection(tmp_path, first, fmt):
    path = tmp_path / "log.jsonl"
    path.write_bytes(orjson.dumps(first) + b"\n")
    assert detect_format(path) == fmt


def test_without_a_tokenizer_the_log_is_one_line_saying_what_to_pass(tmp_path):
    log = tmp_path / "chat.jsonl"
    log.write_bytes(_line(prompt="x"))
    result = CliRunner().invoke(cli, ["ingest", str(log), "--db", str(tmp_path / "a.duckdb")])
    assert result.exit_code == 2
    assert result.output == (
        f"Error: {log}: a chat/completion log holds text, not token ids: pass --tokenizer PATH "
        "(the served model's folder, with tokenizer.json and tokenizer_config.json) to "
        "tokenize it as the server did\n"
    )
    assert not (tmp_path / "a.duckdb").exists()


def _bad_paths(root: Path, models) -> list[tuple[str, str]]:
    (root / "only_json").mkdir()
    (root / "only_json" / "tokenizer.json").write_text("{}")
    (root / "bad").mkdir()
    (root / "bad" / "tokenizer.json").write_text("{}")
    (root / "bad" / "tokenizer_config.json").write_text("{}")
    (root / "template").mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (root / "template" / name).write_bytes((models["qwen"] / name).read_bytes())
    (root / "template" / "chat_template.jinja").write_text("{% if %}")
    return [
        (
            "Qwen/Qwen2.5-7B-Instruct",
            "--tokenizer Qwen/Qwen2.5-7B-Instruct: no such folder or file (hpa never downloads a "
            "tokenizer: give a local model folder, e.g. one huggingface-cli download wrote)",
        ),
        (
            str(models["qwen"] / "tokenizer_config.json"),
            f"--tokenizer {models['qwen'] / 'tokenizer_config.json'}: not a tokenizer.json (give "
            "the model folder, or its tokenizer.json with tokenizer_config.json beside it)",
        ),
        (
            str(root / "only_json"),
            f"--tokenizer {root / 'only_json'}: {root / 'only_json' / 'tokenizer_config.json'} is "
            "missing (a model folder holds tokenizer.json and tokenizer_config.json)",
        ),
        (
            str(root / "template"),
            f"--tokenizer {root / 'template'}: the chat template does not parse (Expected an "
            "expression, got 'end of statement block')",
        ),
    ]


def test_a_tokenizer_that_is_not_one_is_refused_before_anything_is_read(tmp_path, models):
    log = tmp_path / "chat.jsonl"
    log.write_bytes(_line(prompt="x"))
    for path, message in _bad_paths(tmp_path, models):
        with pytest.raises(ConfigError) as err:
            ingest([log], db_path=tmp_path / "a.duckdb", tokenizer=path)
        assert str(err.value) == message
        assert not (tmp_path / "a.duckdb").exists()
    with pytest.raises(ConfigError, match=r"bad/tokenizer.json is not a tokenizers file \("):
        ingest([log], db_path=tmp_path / "a.duckdb", tokenizer=str(tmp_path / "bad"))


def test_a_tokenizer_no_file_uses_is_said(tmp_path, models):
    trace = tmp_path / "ids.jsonl"
    trace.write_bytes(_line(request_id="a", prompt_token_ids=[1, 2]))
    result = ingest([trace], db_path=tmp_path / "a.duckdb", tokenizer=str(models["qwen"]))
    assert result.warnings == (
        "--tokenizer was not used: no file is a chat or completion log (format chat); the "
        "traces' own ids are stored",
    )


def test_without_the_text_extra_one_line_names_it(tmp_path, models):
    """A subprocess in which tokenizers cannot be imported (as where the extra is missing)."""
    log = tmp_path / "chat.jsonl"
    log.write_bytes(_line(prompt="x"))
    hide = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'tokenizers':\n"
        "            raise ModuleNotFoundError(f\"No module named '{name}'\", name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "from analyzer.cli import main\n"
        "sys.argv = ['hpa', *sys.argv[1:]]\n"
        "main()\n"
    )
    args = [
        "ingest",
        str(log),
        "--db",
        str(tmp_path / "a.duckdb"),
        "--tokenizer",
        str(models["qwen"]),
    ]
    done = subprocess.run([sys.executable, "-c", hide, *args], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr == (
        "Error: --tokenizer needs the text extra (tokenizers is not installed): "
        "pip install 'hybrid-prefix-analyzer[text]'\n"
    )


def test_a_store_from_before_gains_the_provenance_columns(tmp_path, models):
    """A store whose sources table predates the tokenizer columns: opening it for an ingest
    adds them (schema.sql), null for the files ingested before."""
    ids = tmp_path / "ids.jsonl"
    ids.write_bytes(_line(request_id="a", prompt_token_ids=[1, 2]))
    db = tmp_path / "old.duckdb"
    ingest([ids], db_path=db)
    con = duckdb.connect(str(db))
    try:
        for column in ("tokenizer", "tokenizer_sha256", "chat_template_sha256"):
            con.execute(f"ALTER TABLE sources DROP COLUMN {column}")
    finally:
        con.close()
    log = tmp_path / "chat.jsonl"
    log.write_bytes(_line(prompt=PROMPTS[0]))
    ingest([log], db_path=db, tokenizer=str(models["qwen"]))
    con = duckdb.connect(str(db), read_only=True)
    try:
        got = con.execute("SELECT format, tokenizer FROM sources ORDER BY source_id").fetchall()
    finally:
        con.close()
    assert got == [("jsonl", None), ("chat", "qwen")]


@pytest.mark.parametrize("name", ["qwen", "llama"])
def test_a_later_turn_shares_the_earlier_turns_whole_prompt(tmp_path, models, name):
    """What prefix caching rests on: turn 2's ids start with all of turn 1's (its generation
    prompt included), so hpa match finds turn 1 whole."""
    first, second = CONVERSATIONS[1]["messages"][:2], CONVERSATIONS[1]["messages"]
    kwargs = template_kwargs(name)
    lines = [
        _line(request_id="t1", timestamp=1, messages=first, chat_template_kwargs=kwargs),
        _line(request_id="t2", timestamp=2, messages=second, chat_template_kwargs=kwargs),
    ]
    _, rows, _ = _ingest(tmp_path, models, lines, name=name)
    ids1, ids2 = rows[0][2], rows[1][2]
    assert len(ids2) > len(ids1) and ids2[: len(ids1)] == ids1
    db = str(tmp_path / "chat.duckdb")
    assert CliRunner().invoke(cli, ["match", "--db", db]).exit_code == 0
    con = duckdb.connect(db, read_only=True)
    try:
        shared = con.execute(
            "SELECT request_id, shared_any_tokens FROM prefix_matches ORDER BY request_id"
        ).fetchall()
    finally:
        con.close()
    assert shared == [("t1", 0), ("t2", len(ids1))]
