"""`analyzer/schemas/policy.schema.json` (package data), generated from the config tables
(the policy's fields, their choices and minimums, the schedule's keys, the engine table, the
engine options), so the schema a user's editor checks against cannot drift from what
`build_policy` accepts.

    python -m analyzer.config.schema > analyzer/schemas/policy.schema.json    # `make schemas`

`tests/config/test_schema.py` fails when the committed file differs from this output.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any

from analyzer.config.engines import ENGINES
from analyzer.config.options import OPTIONS, Option
from analyzer.config.policy import BASE_KEYS, CHOICES, MAXIMUMS, MINIMUMS, Policy
from analyzer.config.routers import COMMON_KEYS, ROUTER_OPTIONS
from analyzer.config.schedule import CONCURRENT_KEYS, SCHEDULES
from analyzer.config.step_time import Efficiency

# A stable name, not a location: it stayed when the file moved into the package.
SCHEMA_ID = "https://github.com/hybrid-prefix-analyzer/hpa/schemas/policy.schema.json"

# What each policy field means; its type, choices, minimum and default come from the tables.
BASE_DOCS = {
    "engine": "Keys named <engine>_* are that engine's options; setting one for another "
    "engine is an error (docs/engines.md).",
    "groups": "Cache groups present. Mamba stands for any recurrent layer (Mamba, GDN, "
    "linear attention) in vLLM's align mode.",
    "block_size": "Block size of every group (align mode forces Mamba = attention); null = "
    "from the model preset.",
    "prefix_match_unit": "Hash block size (vLLM --prefix-match-unit); must divide "
    "block_size; null = block_size.",
    "retention_interval": "null = keep every produced sparse state; 0 = semantic checkpoints "
    "only (replay boundary, junction); N (a multiple of block_size) = also every N tokens.",
    "sliding_window": "Window W in tokens; required exactly when groups has sliding_window.",
    "max_num_batched_tokens": "Per-step token budget (chunked prefill). The default, 8192, "
    "is vllm serve's on a GPU of >= 70 GiB other than an A100 (vLLM 0.33 "
    "EngineArgs.get_batch_defaults); with a gpu named (schedule concurrent) vllm serve's on "
    "that GPU: 16384 from 160 GiB (B200, MI300X), 2048 on an A100 or L40S. On a hybrid model "
    "chunk ends are where Mamba states exist. null = a prompt is one chunk (schedule serial) "
    "or 8192 (schedule concurrent).",
    "num_blocks": "Shared pool capacity in blocks, counted as vLLM counts num_gpu_blocks "
    "(all groups draw from it); null = unbounded.",
    "spec_decode": "eagle_lookahead = vLLM 0.33 default for EAGLE/MTP (lookahead hashes, "
    "no drop); eagle_drop = legacy last-block drop.",
    "replicas": "Engine replicas, each with its own cache of num_blocks.",
    "routing": "Which replica serves a request (the router table, docs/engines.md). Static, "
    "decided before the replay: trace = the record's replica; round_robin = in arrival "
    "order; session = a conversation's requests to one replica. Live, as requests arrive "
    "(schedule concurrent; knobs router_* and <router>_*): least_loaded, prefix_aware (also "
    "load-blind under schedule serial), llm-d, dynamo, sglang, chwbl.",
    "cache_scope": "revision = one cache per model revision on each replica (as deployments "
    "run); shared = one cache for every revision (what one deployment for all the traffic "
    "would reuse).",
    "model": "A preset in analyzer/schemas/models/ (block size and bytes per block and per "
    "state, for memory figures).",
    "schedule": "serial = each request admitted after the previous one finished (the "
    "no-contention bound); concurrent = every request through vLLM 0.33's scheduler on a "
    "simulated clock (engine vllm only; the trace needs timestamps). The next four keys "
    "apply to concurrent only.",
    "max_num_seqs": "schedule concurrent: most requests running at once (vLLM --max-num-seqs); "
    "with a gpu named, vllm serve's on that GPU: 1024 from 70 GiB (not an A100), else 256.",
    "step_base_ms": "schedule concurrent: fixed time of a scheduler step in ms; a step lasts "
    "step_base_ms/1e3 + step_token_us/1e6 x (tokens scheduled in it) seconds.",
    "step_token_us": "schedule concurrent: time per token scheduled in a step, in "
    "microseconds (see step_base_ms).",
    "step_model": "schedule concurrent: how long a step lasts. linear = step_base_ms + "
    "step_token_us per token; roofline = from the model's config and the GPU (compute against "
    "memory traffic, docs/latency.md); aic = NVIDIA AIConfigurator's measured tables (the aic "
    "extra); auto = roofline when a gpu is named, else linear.",
    "gpu": "The GPU the step model prices a step on (schedule concurrent; needs model).",
    "tensor_parallel": "GPUs a replica's model is split over (tensor parallelism), for the "
    "step model.",
    "step_efficiency": "The roofline's efficiency factors that differ from the GPU's "
    "defaults, an object of step_time.Efficiency's fields (hpa calibrate --gpu fits them).",
    "time_scale": "schedule concurrent: a request arrives at (timestamp - earliest "
    "timestamp) x time_scale seconds; < 1 compresses the trace (more contention).",
    "async_scheduling": "schedule concurrent: vLLM's async scheduling, as vllm serve runs by "
    "default: the next batch is scheduled while the GPU runs the current one (two in flight), "
    "so an arrival during a step is first scheduled two steps later and a finished request's "
    "blocks return a step later. false: the synchronous loop. A drafter (spec_decode) runs "
    "the synchronous loop (docs/engines.md).",
}

EXAMPLES = [
    {"groups": ["full_attention", "mamba"], "block_size": 544, "retention_interval": 0},
    {
        "model": "qwen3-next-80b-a3b",
        "retention_interval": None,
        "max_num_batched_tokens": 2048,
        "num_blocks": 4000,
    },
]


def policy_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a policy file."""
    properties = {key: _base_property(key) for key in BASE_KEYS}
    properties.update({key: _option_property(option) for key, option in OPTIONS.items()})
    routers = {**COMMON_KEYS, **ROUTER_OPTIONS}
    properties.update({key: _option_property(option, "routing") for key, option in routers.items()})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "hpa replay policy",
        "description": "How `hpa replay` models the cache. Keys use vLLM's names where vLLM "
        "has one; all sizes are in tokens. `hpa replay --set KEY=VALUE` overrides one key "
        "(VALUE is JSON: null, 0, [..]; else a string).",
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "allOf": _schedule_rules(),
        "examples": EXAMPLES,
    }


def _schedule_rules() -> list[dict[str, Any]]:
    """What `build_policy` checks across keys: a concurrent key away from its default needs
    `schedule: concurrent`; a schedule other than serial needs an engine that replays it."""

    def given(schedule: str) -> dict[str, Any]:
        return {"required": ["schedule"], "properties": {"schedule": {"const": schedule}}}

    defaults = {key: {"const": row.default} for key, row in CONCURRENT_KEYS.items()}
    rules: list[dict[str, Any]] = [
        {"if": {"not": given("concurrent")}, "then": {"properties": defaults}}
    ]
    for schedule in SCHEDULES[1:]:
        engines = [row.name for row in ENGINES.values() if schedule in row.schedules]
        rules.append({"if": given(schedule), "then": {"properties": {"engine": {"enum": engines}}}})
    return rules


def _base_property(key: str) -> dict[str, Any]:
    default = asdict(Policy())[key]
    doc = BASE_DOCS[key]
    if key == "engine":
        prop: dict[str, Any] = {"enum": list(ENGINES)}
        designs = "; ".join(f"{row.name} = {row.design}" for row in ENGINES.values())
        doc = f"Whose semantics to replay: {designs}. {doc}"
    elif key == "groups":
        prop = {
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "contains": {"const": "full_attention"},
            "items": {"enum": list(CHOICES["groups"])},
        }
        default = list(default)
    elif key == "step_efficiency":
        names = [f.name for f in fields(Efficiency)]
        prop = {"type": "object", "propertyNames": {"enum": names}}
        prop["additionalProperties"] = {"type": "number"}
        default = {}
    elif key in CHOICES:
        prop = {"enum": list(CHOICES[key])}
    elif key in CONCURRENT_KEYS and CONCURRENT_KEYS[key].kind == "bool":
        prop = {"type": "boolean"}
    elif key in CONCURRENT_KEYS:
        row = CONCURRENT_KEYS[key]
        bound = "exclusiveMinimum" if row.exclusive else "minimum"
        prop = {"type": "integer" if row.kind == "int" else "number", bound: row.minimum}
        prop["maximum"] = row.maximum
    elif key in MINIMUMS:
        nullable = key != "replicas"
        prop = {"type": ["integer", "null"] if nullable else "integer", "minimum": MINIMUMS[key]}
        if key in MAXIMUMS:
            prop["maximum"] = MAXIMUMS[key]
    else:
        prop = {"type": ["string", "null"]}
    if default is not None:
        prop["default"] = default
    prop["description"] = doc
    return prop


def _option_property(option: Option, owner: str = "engine") -> dict[str, Any]:
    if option.kind == "choice":
        prop: dict[str, Any] = {"enum": list(option.choices)}
    elif option.kind == "bool":
        prop = {"type": "boolean"}
    elif option.kind == "number_or_auto":
        prop = {"anyOf": [{"type": "number", "minimum": option.minimum}, {"const": "auto"}]}
    elif option.kind == "number_or_name":
        number = {"type": "number", "minimum": option.minimum}
        prop = {"anyOf": [number, {"enum": list(option.choices)}]}
    else:
        kind = "integer" if option.kind == "int" else "number"
        prop = {"type": [kind, "null"] if option.nullable else kind, "minimum": option.minimum}
        prop["maximum"] = option.maximum
    prop["default"] = option.default
    who = "a live router" if option.engine == "*" else f"{owner} {option.engine}"
    prop["description"] = f"{who}: {option.doc}"
    return prop


def schema_text() -> str:
    """The schema file's text: two-space indents, a final newline."""
    return json.dumps(policy_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
