"""The router table: every `routing` a policy may name, the module that implements it, whether
it reads the replicas' live state, and the upstream code it follows (docs/engines.md cites
each row in full).

Adding a router is one module in `analyzer/sim/routers/` exposing `ROUTER` (its class) and one
row here; its knobs are rows of `ROUTER_OPTIONS` whose `engine` field names the router. This
table never imports a router, so config stays below sim.

A static router (`live` False) decides every replica from the trace alone, before the replay:
each replica then replays on its own (in parallel, closed forms allowed). A live router reads
the replicas' load and caches at each arrival, so one fleet replays on one clock
(`analyzer.sim.fleet`), which needs `schedule: concurrent`.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

from analyzer.config.options import Option
from analyzer.errors import ConfigError


@dataclass(frozen=True)
class RouterRow:
    """One router. `module`: the module whose `ROUTER` class implements it; `follows`: the
    upstream code it follows (repository, path, function, version), in one line;
    `serial_static`: under the serial schedule (no clock, no load) it is decided before the
    replay, load-blind (`analyzer.sim.routing`)."""

    name: str
    module: str
    live: bool
    follows: str
    serial_static: bool = False


_ROWS = (
    RouterRow("trace", "analyzer.sim.routers.static", False, "the record's own replica"),
    RouterRow("round_robin", "analyzer.sim.routers.static", False, "request i to replica i mod n"),
    RouterRow(
        "session",
        "analyzer.sim.routers.static",
        False,
        "a conversation's requests to one replica, conversations round robin",
    ),
    RouterRow(
        "least_loaded",
        "analyzer.sim.routers.least_loaded",
        True,
        "vllm-project/vllm vllm/v1/engine/core_client.py DPLBAsyncMPClient "
        "get_core_engine_for_request (waiting + running, waiting weighted up by KV usage "
        "above half; rotating start), v0.33.0",
    ),
    RouterRow(
        "prefix_aware",
        "analyzer.sim.routers.prefix_aware",
        True,
        "hpa's own: longest prefix the router sent to a replica, in blocks, with a load term",
        serial_static=True,
    ),
    RouterRow(
        "llm-d",
        "analyzer.sim.routers.llmd",
        True,
        "llm-d/llm-d-inference-scheduler pkg/epp/config/loader/defaults.go loadDefaultConfig "
        "(queue 2, kv-cache-utilization 2, prefix-cache 3, max-score picker)",
    ),
    RouterRow(
        "dynamo",
        "analyzer.sim.routers.dynamo",
        True,
        "ai-dynamo/dynamo lib/kv-router/src/scheduling/selector/default.rs worker cost "
        "(prefill blocks after overlap + decode blocks), 1.6.1",
    ),
    RouterRow(
        "sglang",
        "analyzer.sim.routers.sglang",
        True,
        "sgl-project/sglang sgl-router/src/policies/cache_aware.rs CacheAwarePolicy with "
        "the CLI's defaults (router_args.py)",
    ),
    RouterRow(
        "chwbl",
        "analyzer.sim.routers.chwbl",
        True,
        "substratusai/kubeai internal/loadbalancer/balance_chwbl.go (consistent hashing "
        "with bounded loads, 125 %)",
    ),
)

ROUTERS: dict[str, RouterRow] = {row.name: row for row in _ROWS}
ROUTER_NAMES: tuple[str, ...] = tuple(ROUTERS)


def router(name: str) -> RouterRow:
    """The table's row for `name`; ConfigError listing the known routers otherwise."""
    row = ROUTERS.get(name)
    if row is None:
        raise ConfigError(f"policy key 'routing': no router {name!r}; known: {', '.join(ROUTERS)}")
    return row


# Knobs every live router reads. `router_seed` null: ties to the lowest replica index.
COMMON_KEYS: dict[str, Option] = {
    "router_seed": Option(
        "*",
        "int",
        0,
        "Seed of a live router's random choices (ties, sampling, exploration); null = no "
        "randomness: every tie to the lowest replica index.",
        nullable=True,
    ),
    "router_refresh_s": Option(
        "*",
        "number",
        0.0,
        "How stale a live router's view of replica load may be, in seconds: it reads the "
        "waiting, running and KV usage scraped at the last multiple of this period (0 = "
        "exact, at the arrival instant; llm-d scrapes every 0.05 s).",
        maximum=1e6,
    ),
}

ROUTER_OPTIONS: dict[str, Option] = {
    "prefix_aware_load_weight": Option(
        "prefix_aware",
        "number",
        1.0,
        "Weight of the replica's queued prompt blocks against the prompt blocks it would "
        "compute (0 = load-blind).",
        maximum=1e6,
    ),
    "llmd_queue_weight": Option("llm-d", "number", 2.0, "queue-scorer weight.", maximum=1e6),
    "llmd_kv_weight": Option(
        "llm-d", "number", 2.0, "kv-cache-utilization-scorer weight.", maximum=1e6
    ),
    "llmd_prefix_weight": Option(
        "llm-d", "number", 3.0, "prefix-cache-scorer weight.", maximum=1e6
    ),
    "llmd_prefix": Option(
        "llm-d",
        "choice",
        "approximate",
        "approximate = the router's own index of the blocks it sent (an LRU per endpoint); "
        "precise = what each replica's pool holds (its KV events).",
        choices=("approximate", "precise"),
    ),
    "llmd_max_prefix_blocks": Option(
        "llm-d", "int", 256, "Approximate index: most leading blocks matched.", minimum=1
    ),
    "llmd_lru_blocks": Option(
        "llm-d",
        "int",
        None,
        "Approximate index: blocks remembered per endpoint; null = the replica's num_blocks "
        "(autoTune), or 31,250 when the pool is unbounded.",
        minimum=1,
        nullable=True,
    ),
    "llmd_affinity_threshold": Option(
        "llm-d",
        "number",
        None,
        "prefix-cache-affinity filter: keep only endpoints whose prefix score reaches this "
        "(upstream 0.8); null = no filter (the default profile has none).",
        maximum=1,
        nullable=True,
    ),
    "llmd_exploration": Option(
        "llm-d",
        "number",
        0.01,
        "prefix-cache-affinity filter: probability of skipping it (explorationProbability).",
        maximum=1,
    ),
    "dynamo_overlap_credit": Option(
        "dynamo",
        "number",
        1.0,
        "overlap_score_credit: prefill blocks credited per cached block.",
        maximum=1e6,
    ),
    "dynamo_prefill_load_scale": Option(
        "dynamo", "number", 1.0, "prefill_load_scale: weight of the prefill blocks.", maximum=1e6
    ),
    "dynamo_temperature": Option(
        "dynamo",
        "number",
        0.0,
        "router_temperature: 0 = the lowest cost; above 0, softmax sampling over costs.",
        maximum=1e6,
    ),
    "dynamo_active_request_weight": Option(
        "dynamo",
        "number",
        0.0,
        "decode_active_request_weight: cost per active request.",
        maximum=1e6,
    ),
    "sglang_router_cache_threshold": Option(
        "sglang",
        "number",
        0.3,
        "--cache-threshold: a match rate above it routes to the best match.",
        maximum=1,
    ),
    "sglang_router_balance_abs": Option(
        "sglang", "int", 64, "--balance-abs-threshold (requests in flight)."
    ),
    "sglang_router_balance_rel": Option(
        "sglang", "number", 1.5, "--balance-rel-threshold.", maximum=1e6
    ),
    "sglang_router_eviction_interval_s": Option(
        "sglang", "number", 120.0, "--eviction-interval (seconds).", maximum=1e9
    ),
    "sglang_router_max_tree_size": Option(
        "sglang", "int", 1 << 26, "--max-tree-size (units per worker kept at eviction)."
    ),
    "chwbl_load_factor": Option(
        "chwbl",
        "number",
        1.25,
        "meanLoadPercentage / 100: the bound on a replica's load.",
        minimum=1,
        maximum=1e6,
    ),
    "chwbl_replication": Option(
        "chwbl", "int", 256, "Points per replica on the hash ring.", minimum=1
    ),
    "chwbl_prefix_blocks": Option(
        "chwbl",
        "int",
        1,
        "Leading prompt blocks hashed into the key (KubeAI: a prefix of the prompt's characters).",
        minimum=1,
    ),
}

ROUTER_KEYS = (*COMMON_KEYS, *ROUTER_OPTIONS)


def resolve_router(routing: str, values: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The knobs of `routing` (sorted by key), defaults filled in: the common keys for a live
    router, its own options; a key of another router, or a live key on a static router, is
    an error rather than silently ignored."""
    row = router(routing)
    for key in sorted(values):
        owner = ROUTER_OPTIONS[key].engine if key in ROUTER_OPTIONS else "*"
        if owner == "*" and not row.live:
            raise ConfigError(
                f"policy key {key!r} applies to a live router; routing {routing!r} is decided "
                "before the replay"
            )
        if owner not in ("*", routing):
            raise ConfigError(f"policy key {key!r} applies to routing {owner}, not {routing}")
    if not row.live:
        return ()
    options = {**COMMON_KEYS, **{k: o for k, o in ROUTER_OPTIONS.items() if o.engine == routing}}
    return tuple(
        (key, opt.check(key, values.get(key, opt.default))) for key, opt in sorted(options.items())
    )


def routing_help() -> str:
    """The routers and their knobs with defaults, for `hpa replay --help` (click epilog)."""
    lines = ["\b", "Routing (--set routing=NAME; docs/engines.md cites each router's code):"]
    for row in _ROWS:
        if not row.live:
            text = f"{row.name}: static, {row.follows}"
        else:
            knobs = [
                f"{k}={_shown(o.default)}"
                for k, o in ROUTER_OPTIONS.items()
                if o.engine == row.name
            ]
            text = f"{row.name}: live{'; ' + ', '.join(knobs) if knobs else ''}"
        lines += textwrap.wrap(text, 78, initial_indent="  ", subsequent_indent="      ")
    common = ", ".join(f"{k}={_shown(o.default)}" for k, o in COMMON_KEYS.items())
    text = f"every live router: {common}; schedule concurrent"
    lines += textwrap.wrap(text, 78, initial_indent="  ", subsequent_indent="      ")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    return "null" if value is None else str(value)
