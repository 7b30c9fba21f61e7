"""The docs against the code: every CLI command and option is documented in docs/commands.md,
the README's shell examples run, every relative link resolves, and the README stays short.

In the spirit of sqlite-utils' tests/test_docs.py: the CLI is walked through click, so a new
command or option without docs fails here, naming it.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from analyzer.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
COMMANDS_MD = DOCS / "commands.md"
MAX_README_LINES = 250
# Bundled folders a README example may name by a relative path; linked into the temp cwd.
BUNDLED = ("sample_traces",)
SHELL_LANGUAGES = {"bash", "sh", "console", "shell", "shell-session"}


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _option_names(command: click.Command) -> list[str]:
    names = []
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            names.extend(param.opts)
            names.extend(param.secondary_opts)
    return names


def _sections(text: str) -> dict[str, str]:
    """`## ...` heading -> the text under it, up to the next `## ` heading."""
    sections: dict[str, str] = {}
    heading = None
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
            sections[heading] = ""
        elif heading is not None:
            sections[heading] += line + "\n"
    return sections


def _command_section(name: str) -> str:
    text = COMMANDS_MD.read_text()
    for heading, body in _sections(text).items():
        if re.fullmatch(rf"`?hpa {re.escape(name)}`?", heading):
            return heading + "\n" + body
    raise AssertionError(f"docs/commands.md has no '## `hpa {name}`' section")


def _mentions(text: str, token: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(token)}(?![\w-])", text) is not None


COMMANDS = sorted(cli.commands)
COMMAND_OPTIONS = [
    (name, option) for name in COMMANDS for option in _option_names(cli.commands[name])
]
COMMAND_ARGUMENTS = [
    (name, param.human_readable_name)
    for name in COMMANDS
    for param in cli.commands[name].params
    if isinstance(param, click.Argument)
]


@pytest.mark.parametrize("name", COMMANDS)
def test_command_has_a_section(name):
    assert _command_section(name).strip()


@pytest.mark.parametrize(("name", "option"), COMMAND_OPTIONS)
def test_command_option_is_documented(name, option):
    assert _mentions(_command_section(name), option), (
        f"option {option} of `hpa {name}` is missing from its section of docs/commands.md"
    )


@pytest.mark.parametrize(("name", "argument"), COMMAND_ARGUMENTS)
def test_command_argument_is_documented(name, argument):
    assert _mentions(_command_section(name), argument), (
        f"argument {argument} of `hpa {name}` is missing from its section of docs/commands.md"
    )


@pytest.mark.parametrize("option", _option_names(cli))
def test_group_option_is_documented(option):
    assert _mentions(COMMANDS_MD.read_text(), option)


def test_documented_commands_exist():
    documented = [
        m[1] for m in re.finditer(r"^## `?hpa ([\w-]+)`?\s*$", COMMANDS_MD.read_text(), re.M)
    ]
    assert sorted(documented) == COMMANDS


# --- The README's shell examples ------------------------------------------------------------


def _code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    return [
        (m[1].strip().lower(), m[2])
        for m in re.finditer(r"^```([^\n`]*)\n(.*?)^```\s*$", text, re.M | re.S)
    ]


def _hpa_commands(body: str) -> list[str]:
    """The `hpa ...` commands of a shell block: backslash continuations joined, a quoted
    argument spanning lines kept whole, comment and output lines skipped, `$ ` prompts
    stripped."""
    commands = []
    lines = iter(body.splitlines())
    for raw in lines:
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:].strip()
        if not line.startswith("hpa "):
            continue  # a comment, an output line, or another program
        command = line
        while True:
            if command.endswith("\\"):
                joined, newline = command[:-1].rstrip() + " ", False
            else:
                try:
                    shlex.split(command, comments=True)
                    break
                except ValueError:  # a quoted argument continues on the next line
                    joined, newline = command + "\n", True
            following = next(lines, None)
            assert following is not None, f"unterminated command in a code block: {command!r}"
            command = joined + (following if newline else following.strip())
        commands.append(command)
    return commands


def _readme_commands() -> list[str]:
    return [
        command
        for language, body in _code_blocks(README.read_text())
        if language in SHELL_LANGUAGES
        for command in _hpa_commands(body)
    ]


def test_readme_has_commands_to_run():
    assert len(_readme_commands()) >= 5


def test_command_extraction_joins_continuations_and_quotes():
    body = (
        "# a comment\n"
        "hpa replay --db x.duckdb \\\n"
        "    --set a=1          # why\n"
        "#   output line\n"
        'hpa query "SELECT 1,\n'
        '           2" --db x.duckdb\n'
        "make test\n"
    )
    commands = [shlex.split(c, comments=True) for c in _hpa_commands(body)]
    assert commands == [
        ["hpa", "replay", "--db", "x.duckdb", "--set", "a=1"],
        ["hpa", "query", "SELECT 1,\n           2", "--db", "x.duckdb"],
    ]


def test_readme_commands_run(tmp_path, monkeypatch):
    for name in BUNDLED:
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for command in _readme_commands():
        args = shlex.split(command, comments=True)
        assert args[0] == "hpa"
        result = runner.invoke(cli, args[1:], catch_exceptions=True)
        assert result.exit_code == 0, (
            f"README command failed (exit {result.exit_code}): {command}\n"
            f"{result.output[-3000:]}\n{result.exception!r}"
        )


# --- Links ----------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and not in_code:
            slug = _slug(m[1])
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code."""
    text = re.sub(r"^```.*?^```\s*$", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def _links() -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(ROOT)), target)
        for path in _markdown_files()
        for target in LINK.findall(_prose(path.read_text()))
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:
    ]


def test_docs_exist():
    names = {p.name for p in DOCS.glob("*.md")}
    required = {"README.md", "commands.md", "traces.md", "engines.md", "report.md"}
    required |= {"scaling.md", "contributing.md", "definitions.md"}
    assert required <= names


def test_every_page_is_in_the_index():
    """docs/README.md's table links every page of the manual."""
    index = (DOCS / "README.md").read_text()
    linked = {target.partition("#")[0] for target in LINK.findall(_prose(index))}
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert pages - linked == set(), "pages missing from docs/README.md"


def test_there_are_links_to_check():
    assert len(_links()) > 20


@pytest.mark.parametrize(("source", "target"), _links())
def test_relative_link_resolves(source, target):
    path_part, _, anchor = target.partition("#")
    base = (ROOT / source).parent
    path = (base / path_part).resolve() if path_part else ROOT / source
    assert path.exists(), f"{source}: link to {target} points at a missing file"
    if anchor and path.suffix == ".md":
        assert anchor in _anchors(path), f"{source}: no heading for #{anchor} in {path.name}"


def test_slug_follows_github():
    assert _slug("Scaling out (`--executor`)") == "scaling-out---executor"
    assert _slug("Other engines' designs") == "other-engines-designs"
    assert _slug("Engine `suffix_replay`") == "engine-suffix_replay"
    assert _slug("Capacity estimate: a 100-replica, 10 B-token month") == (
        "capacity-estimate-a-100-replica-10-b-token-month"
    )


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


# docs/engines.md's table of the demo's runs: each row's label -> the policy values of the
# run it describes (the demo's first run with them), checked against a fresh `hpa demo`.
DEMO_TABLE_HEAD = "| policy | useful-hit ratio | sparse-retention miss | granularity |"
DEMO_RUNS = {
    "vLLM 0.33 default (retention 0)": {"engine": "vllm", "retention_interval": 0},
    "vLLM, retention null": {"engine": "vllm", "retention_interval": None},
    "`sglang` no_buffer": {"engine": "sglang", "sglang_strategy": "no_buffer"},
    "`sglang` extra_buffer": {"engine": "sglang", "sglang_strategy": "extra_buffer"},
    "`marconi` (alpha 1)": {"engine": "marconi", "marconi_alpha": 1.0},
    "`trtllm`, a snapshot every block": {"engine": "trtllm", "trtllm_interval": 544},
    "`llamacpp`, one slot, no host cache": {"engine": "llamacpp", "llamacpp_slots": 1},
    "`suffix_replay`, R = 512": {"engine": "suffix_replay", "suffix_replay_tokens": 512},
    "`oracle` bound": {"engine": "oracle"},
}
DEMO_FIGURES = """
SELECT run_id, any_value(r.policy), sum(q.hit_tokens) / sum(q.prompt_tokens),
       sum(q.sparse_retention_miss_tokens), sum(q.lost_granularity_tokens),
       sum(q.lost_eviction_tokens), sum(q.replay_tokens)
FROM replay_runs r JOIN replay_requests q USING (run_id)
WHERE measured GROUP BY run_id ORDER BY run_id
"""


def _demo_table() -> dict[str, list[str]]:
    lines = (DOCS / "engines.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(DEMO_TABLE_HEAD))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        label, *cells = (cell.strip() for cell in line.strip("|").split("|"))
        rows[label] = cells
    return rows


def test_the_engines_demo_table_is_what_the_demo_stores(tmp_path):
    """(issue 33 item 15: the table gave 81,056 / 81,600 tokens as "FA KV not held" that the
    demo stored under granularity)"""
    import json

    import duckdb

    done = CliRunner().invoke(cli, ["demo", "--out", str(tmp_path / "demo")])
    assert done.exit_code == 0, done.output
    con = duckdb.connect(str(tmp_path / "demo" / "demo.duckdb"), read_only=True)
    try:
        runs = con.execute(DEMO_FIGURES).fetchall()
    finally:
        con.close()
    table = _demo_table()
    assert list(table) == list(DEMO_RUNS)
    for label, wanted in DEMO_RUNS.items():
        figures = next(
            r[2:] for r in runs if wanted.items() <= json.loads(r[1]).items()
        )  # the first run with those values
        ratio, *tokens = figures
        assert table[label] == [f"{ratio:.1%}", *(f"{int(t):,}" for t in tokens)], label
