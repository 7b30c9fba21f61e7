"""The router table: names, knobs, and what `hpa replay --help` says of them."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.config.routers import ROUTER_KEYS, ROUTERS, resolve_router, router
from analyzer.errors import ConfigError


def test_replay_help_lists_every_router_and_knob():
    out = CliRunner().invoke(cli, ["replay", "--help"]).output
    for name in ROUTERS:
        assert f"    {name}: " in out
    for key in ROUTER_KEYS:
        assert f"{key}=" in out


def test_an_unknown_router_lists_the_known_ones():
    with pytest.raises(ConfigError) as info:
        router("random")
    assert str(info.value) == (
        "policy key 'routing': no router 'random'; known: trace, round_robin, session, "
        "least_loaded, prefix_aware, llm-d, dynamo, sglang, chwbl"
    )


@pytest.mark.parametrize(
    ("routing", "values", "want"),
    [
        ("round_robin", {}, ()),
        ("least_loaded", {}, (("router_refresh_s", 0.0), ("router_seed", 0))),
        (
            "dynamo",
            {"dynamo_temperature": 0.5, "router_seed": None},
            (
                ("dynamo_active_request_weight", 0.0),
                ("dynamo_overlap_credit", 1.0),
                ("dynamo_prefill_load_scale", 1.0),
                ("dynamo_temperature", 0.5),
                ("router_refresh_s", 0.0),
                ("router_seed", None),
            ),
        ),
    ],
)
def test_knobs_resolve_with_their_defaults(routing, values, want):
    assert resolve_router(routing, values) == want


def test_every_live_router_module_exposes_its_class():
    import importlib

    for row in ROUTERS.values():
        assert hasattr(importlib.import_module(row.module), "ROUTER"), row.name
