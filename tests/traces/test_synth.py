"""Tests of the seeded synthetic trace generator and `hpa synth`."""

from __future__ import annotations

import gzip
import math
from collections import Counter

import orjson
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import ConfigError, InputFileError
from analyzer.traces.synth import SCENARIOS, generate, parse_params, write_jsonl


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _read_jsonl(path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        return [orjson.loads(line) for line in f]


@pytest.fixture(scope="module")
def mixed() -> list[dict]:
    return list(generate("mixed", seed=3, num_requests=1500))


@pytest.mark.parametrize("scenario", ["diagnostic", "groups", "mixed"])
@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_same_seed_gives_identical_bytes(tmp_path, scenario, suffix):
    params = {"num_requests": 200} if scenario == "mixed" else {}
    files = []
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        path = tmp_path / f"{name}{suffix}"
        write_jsonl(generate(scenario, seed=seed, **params), path)
        files.append(path.read_bytes())
    assert files[0] == files[1]
    assert files[0] != files[2]


def test_arrays_and_lists_write_the_same_bytes(tmp_path):
    write_jsonl(generate("mixed", num_requests=50), tmp_path / "lists.jsonl")
    write_jsonl(generate("mixed", num_requests=50, arrays=True), tmp_path / "arrays.jsonl")
    assert (tmp_path / "lists.jsonl").read_bytes() == (tmp_path / "arrays.jsonl").read_bytes()


@pytest.mark.parametrize("shared", [543, 545, 1087, 1088, 1089, 1632])
def test_diagnostic_shares_exactly_shared_tokens(shared):
    records = list(generate("diagnostic", shared_tokens=shared))
    assert [r["timestamp"] for r in records] == [0.0, 1.0, 2.0]
    prompts = [r["prompt_token_ids"] for r in records]
    assert all(len(p) == 2176 for p in prompts)
    for i in range(3):
        for j in range(i + 1, 3):
            assert _common_prefix(prompts[i], prompts[j]) == shared
    # The first tail token never occurs in the shared part either.
    assert all(p[shared] not in set(prompts[0][:shared]) for p in prompts)


def test_groups_geometry():
    records = list(generate("groups", shared_tokens=1500))
    assert len(records) == 32
    assert all(len(r["prompt_token_ids"]) == 2200 for r in records)
    assert [r["prompt_family"] for r in records] == [
        f"group-{g}" for g in range(8) for _ in range(4)
    ]
    assert len({r["request_id"] for r in records}) == 32
    firsts = {r["prompt_token_ids"][0] for r in records}
    assert len(firsts) == 8  # groups differ from their first token
    for a in range(32):
        for b in range(a + 1, 32):
            expected = 1500 if a // 4 == b // 4 else 0
            pa, pb = records[a]["prompt_token_ids"], records[b]["prompt_token_ids"]
            assert _common_prefix(pa, pb) == expected


def test_token_ids_are_in_the_vocabulary(mixed):
    tokens = [t for r in mixed[:200] for t in r["prompt_token_ids"]]
    assert min(tokens) >= 0 and max(tokens) < 151_000


def test_mixed_has_families_revisions_replicas(mixed):
    assert Counter(r["prompt_family"] for r in mixed).keys() == {
        "chat",
        "multi_turn",
        "rag",
        "agent",
    }
    revisions = [r["model_revision"] for r in mixed]
    assert len(set(revisions)) == 2
    assert revisions == sorted(revisions)  # one switch, old revision first
    assert {r["replica"] for r in mixed} == {"r0", "r1"}
    assert len({r["tenant"] for r in mixed}) >= 2
    assert 0 < sum("cache_salt" in r for r in mixed) < 0.1 * len(mixed)
    times = [r["timestamp"] for r in mixed]
    assert times == sorted(times)
    assert len({r["request_id"] for r in mixed}) == len(mixed)
    mean = sum(len(r["prompt_token_ids"]) for r in mixed) / len(mixed)
    assert 600 <= mean <= 1600
    assert all(r["ttft_ms"] > 0 for r in mixed)


def test_mixed_multi_turn_extends_previous_prompt_and_output(mixed):
    by_id = {r["request_id"]: r for r in mixed}
    followups = [r for r in mixed if r.get("parent_request_id")]
    assert {r["prompt_family"] for r in followups} == {"multi_turn", "agent"}
    assert any(r["prompt_family"] == "multi_turn" for r in followups)
    for record in followups:
        parent = by_id[record["parent_request_id"]]
        assert parent["conversation_id"] == record["conversation_id"]
        assert parent["timestamp"] <= record["timestamp"]
        history = parent["prompt_token_ids"] + parent["output_token_ids"]
        assert record["prompt_token_ids"][: len(history)] == history
        assert len(record["prompt_token_ids"]) > len(history)
        assert record["output_tokens"] == len(record["output_token_ids"])


def test_scale_tokens_stops_after_the_budget():
    records = list(generate("mixed", scale_tokens=100_000, arrays=True))
    total = sum(len(r["prompt_token_ids"]) for r in records)
    assert total >= 100_000
    assert total - len(records[-1]["prompt_token_ids"]) < 100_000


def test_hash_ids_follow_the_ceil_rule_and_prefixes():
    tokens = list(generate("mixed", seed=3, num_requests=300))
    hashed = list(generate("mixed", seed=3, num_requests=300, block_size=16))
    for plain, record in zip(tokens, hashed, strict=True):
        assert "prompt_token_ids" not in record and "output_token_ids" not in record
        assert record["block_size"] == 16
        assert record["prompt_tokens"] == len(plain["prompt_token_ids"])
        assert len(record["block_hash_ids"]) == math.ceil(record["prompt_tokens"] / 16)
    seen: dict[tuple[int, int], tuple[int, ...]] = {}
    for plain, record in zip(tokens, hashed, strict=True):
        prompt = plain["prompt_token_ids"]
        for k, block_id in enumerate(record["block_hash_ids"]):
            prefix = tuple(prompt[: min(16 * (k + 1), len(prompt))])
            assert seen.setdefault((k, block_id), prefix) == prefix  # equal ids -> equal prefixes
    by_prefix = {prefix: key for key, prefix in seen.items()}
    assert len(by_prefix) == len(seen)  # equal prefixes -> equal ids


def test_hash_ids_of_the_diagnostic_share_whole_blocks_only():
    records = list(generate("diagnostic", shared_tokens=1088, block_size=544))
    ids = [r["block_hash_ids"] for r in records]
    assert all(len(x) == 4 for x in ids)
    assert ids[0][:2] == ids[1][:2] == ids[2][:2]
    assert len({x[2] for x in ids}) == 3


def test_unknown_scenario_lists_the_known_ones():
    with pytest.raises(ConfigError, match="known scenarios: diagnostic, groups, mixed"):
        generate("nope")
    assert set(SCENARIOS) == {"diagnostic", "groups", "mixed"}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: generate("groups", num_requests=3), "no parameter 'num_requests'"),
        (lambda: generate("diagnostic", shared_tokens=3000), "shared_tokens"),
        (lambda: generate("diagnostic", shared_tokens="5"), "expected int"),
        (lambda: generate("diagnostic", block_size=0), "block_size"),
        (lambda: parse_params("mixed", ["rate_per_s"]), "expected KEY=VALUE"),
        (lambda: parse_params("mixed", ["num_requests=1.5"]), "not a valid int"),
    ],
)
def test_bad_arguments_raise_config_error(call, message):
    with pytest.raises(ConfigError, match=message):
        call()


def test_parse_params_types():
    assert parse_params("mixed", ["scale_tokens=5e7", "rate_per_s=2", "num_requests=1_000"]) == {
        "scale_tokens": 50_000_000,
        "rate_per_s": 2.0,
        "num_requests": 1000,
    }
    assert parse_params("mixed", ["scale_tokens=none"]) == {"scale_tokens": None}


def test_cli_synth_writes_the_trace(tmp_path):
    out = tmp_path / "d.jsonl.gz"
    args = ["synth", str(out), "--scenario", "diagnostic", "--param", "shared_tokens=545"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"synth: 3 records, 6,528 prompt tokens -> {out}"
    records = _read_jsonl(out)
    assert _common_prefix(records[0]["prompt_token_ids"], records[1]["prompt_token_ids"]) == 545


def test_cli_synth_hash_ids_and_num_requests(tmp_path):
    out = tmp_path / "m.jsonl"
    args = ["synth", str(out), "--num-requests", "20", "--block-size", "16", "--seed", "2"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    records = _read_jsonl(out)
    assert len(records) == 20 and all("block_hash_ids" in r for r in records)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--param", "bogus=1"], "Error: scenario 'mixed' has no parameter 'bogus'"),
        (
            ["--param", "num_requests=abc"],
            "Error: parameter num_requests: 'abc' is not a valid int",
        ),
        (["--scenario", "nope"], "Error: unknown scenario 'nope'"),
    ],
)
def test_cli_synth_bad_input_is_one_line_error(tmp_path, extra, message):
    out = tmp_path / "x.jsonl"
    result = CliRunner().invoke(cli, ["synth", str(out), *extra])
    assert result.exit_code == 2
    assert result.output.strip().startswith(message)
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_distinct_tokens_that_the_vocabulary_cannot_give_are_an_error_not_a_hang():
    """(`hpa synth --scenario groups` with 4,000 groups of 1,600 shared tokens drew for ever
    once earlier groups' shared tokens had taken all but 6 of the 151,000 ids)"""
    import numpy as np

    from analyzer.traces.synth_mixed import VOCAB_SIZE, distinct_tokens

    banned = set(range(VOCAB_SIZE - 6))
    with pytest.raises(ConfigError) as caught:
        distinct_tokens(np.random.default_rng(0), 8, banned, advice="ask for less")
    assert str(caught.value) == (
        "the generator ran out of distinct token ids: 150,994 of its 151,000 are taken "
        "(shared prefixes' tokens and the first token after each), 8 more are needed; ask for "
        "less"
    )
    picked = distinct_tokens(np.random.default_rng(0), 6, banned, advice="")  # the last 6
    assert sorted(picked.tolist()) == list(range(VOCAB_SIZE - 6, VOCAB_SIZE))


def test_a_generator_that_fails_midway_leaves_no_file(tmp_path):
    def records():
        yield {"request_id": "a", "prompt_token_ids": [1, 2]}
        raise ConfigError("out of ids")

    with pytest.raises(ConfigError):
        write_jsonl(records(), tmp_path / "t.jsonl")
    assert list(tmp_path.iterdir()) == []


def test_a_name_of_255_bytes_is_written(tmp_path):
    """The temporary file has a short name of its own (`.NAME.tmp` was past 255 bytes)."""
    out = tmp_path / ("t" * 249 + ".jsonl")
    stats = write_jsonl([{"request_id": "a", "prompt_token_ids": [1, 2]}], out)
    assert (stats.records, stats.prompt_tokens) == (1, 2)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_a_name_past_255_bytes_is_one_error_and_no_file(tmp_path):
    out = tmp_path / ("t" * 250 + ".jsonl")
    with pytest.raises(InputFileError) as caught:
        write_jsonl([{"request_id": "a", "prompt_token_ids": [1, 2]}], out)
    assert str(caught.value) == f"cannot write {out}: File name too long"
    assert list(tmp_path.iterdir()) == []


# Where the vocabulary runs out, the advice names the scenario's own parameters: it said
# "ask for fewer groups or shorter shared prefixes" to a diagnostic trace (which has no
# groups) and to one group of 200,000 requests, and "1 more are needed". (Prompts of 2 tokens,
# 1 shared: the vocabulary runs out before 200,000 long prompts are drawn.)
SMALL = ["--param", "prompt_tokens=2", "--param", "shared_tokens=1"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            [
                "--scenario",
                "groups",
                *SMALL,
                "--param",
                "num_groups=1",
                "--param",
                "group_size=200000",
            ],
            "1 of its 151,000 is taken (shared prefixes' tokens and the first token after "
            "each), 200,000 more are needed; ask for fewer groups (num_groups), fewer requests "
            "a group (group_size) or shorter shared prefixes (shared_tokens)",
        ),
        (
            ["--scenario", "diagnostic", *SMALL, "--param", "num_requests=160000"],
            "1 of its 151,000 is taken (shared prefixes' tokens and the first token after "
            "each), 160,000 more are needed; ask for fewer requests (num_requests)",
        ),
    ],
)
def test_cli_synth_vocabulary_run_out_names_the_scenarios_parameters(tmp_path, params, message):
    out = tmp_path / "x.jsonl"
    result = CliRunner().invoke(cli, ["synth", str(out), *params])
    assert (result.exit_code, result.output) == (
        2,
        f"Error: the generator ran out of distinct token ids: {message}\n",
    )
    assert not out.exists()


def test_one_more_token_id_is_needed_in_the_singular():
    import numpy as np

    from analyzer.traces.synth_mixed import VOCAB_SIZE, distinct_tokens

    with pytest.raises(ConfigError, match=r", 1 more is needed; ask$"):
        distinct_tokens(np.random.default_rng(0), 1, set(range(VOCAB_SIZE)), advice="ask")
