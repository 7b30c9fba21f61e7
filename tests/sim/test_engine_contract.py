"""Every engine of the engine table (`analyzer.config.engines`) passes the shared engine
checks (`tests/sim/engine_checks.py`): a new row cannot skip them. Each engine's own cases
live in its folder `tests/sim/<package>/`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.config.bundled import SCHEMAS
from analyzer.config.engines import ENGINES, engine
from analyzer.config.options import OPTIONS, UNPREFIXED
from analyzer.config.policy import policy_values
from analyzer.errors import ConfigError
from analyzer.sim.dispatch import check_engine, hit_alignment, load_policy, make_policy
from tests.sim.engine_checks import cat, check_end_to_end, check_invariants, req, toks

NAMES = sorted(ENGINES)
TESTS = Path(__file__).parent


def _requests():
    """A small tree: a shared system prompt, branches, a repeated conversation turn (with
    outputs), a prompt shorter than a block, and a request of another namespace."""
    system = toks(0, 1100)  # past one 512-token snapshot interval (trtllm-default)
    a = cat(system, toks(1000, 1100))
    b = cat(system, toks(2000, 2150))
    return [
        req("r0", a, toks(5000, 5040)),
        req("r1", cat(a, toks(5000, 5039), toks(6000, 6050))),
        req("r2", b),
        req("r3", cat(b, toks(7000, 7100)), toks(8000, 8010)),
        req("r4", toks(0, 10)),
        req("r5", a, namespace=("other",)),
        req("r6", cat(system, toks(9000, 9300))),
    ]


def _policy(name: str):
    values = policy_values(ENGINES[name].preset)
    values.setdefault("block_size", 16)
    return make_policy(values)


@pytest.mark.parametrize("name", NAMES)
def test_row_names_a_module_with_a_replay(name):
    row = engine(name)
    module = __import__(row.module, fromlist=["replay"])
    assert callable(module.replay)
    assert row.design and "\n" not in row.design


@pytest.mark.parametrize("name", NAMES)
def test_preset_is_the_engine_s(name):
    preset = ENGINES[name].preset
    assert json.loads((SCHEMAS / "policies" / f"{preset}.json").read_text())["engine"] == name
    assert load_policy(preset, ["block_size=16"]).engine == name


@pytest.mark.parametrize("name", NAMES)
def test_engine_has_its_own_test_folder(name):
    package = ENGINES[name].module.rsplit(".", 1)[1]
    assert list((TESTS / package).glob("test_*.py")), f"tests/sim/{package}/ has no tests"


@pytest.mark.parametrize("name", NAMES)
def test_invariants_against_the_prefix_oracle(name):
    policy = _policy(name)
    check_engine(policy)
    results = check_invariants(_requests(), policy, hit_alignment(policy))
    assert any(r.attention_match_tokens for r in results)


@pytest.mark.parametrize("name", NAMES)
def test_end_to_end(tmp_path, name):
    values = policy_values(ENGINES[name].preset, ["block_size=32"])
    check_end_to_end(tmp_path, values, ENGINES[name].preset)


def test_every_option_belongs_to_an_engine_of_the_table():
    assert {o.engine for o in OPTIONS.values()} <= set(ENGINES)
    assert all(
        key.startswith(f"{o.engine}_") or (key in UNPREFIXED and o.engine == "vllm")
        for key, o in OPTIONS.items()
    )


def test_unknown_engine_lists_the_table():
    with pytest.raises(ConfigError, match="no replay for engine 'nope'; known: vllm, sglang"):
        engine("nope")
