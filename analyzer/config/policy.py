"""Replay policies (docs/definitions.md#replay-policies): a frozen spec, built from a file or preset
plus `--set` overrides.

This module validates what a user writes; `analyzer.sim.dispatch` adds the engine's own check.

Every key and value is validated here; a bad one is a ConfigError naming it and listing
what is allowed, never a silent default.
"""

from __future__ import annotations

import difflib
import json
import textwrap
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from analyzer.config.bundled import preset_names, preset_text
from analyzer.config.engines import BOUNDS, ENGINE_NAMES, ENGINES
from analyzer.config.hardware import GPU_NAMES, GPUS, batch_defaults
from analyzer.config.models import load_model, model_names
from analyzer.config.options import OPTIONS, resolve
from analyzer.config.policy_files import parse_policy_text, read_policy_file
from analyzer.config.routers import ROUTER_KEYS, ROUTER_NAMES, resolve_router, router
from analyzer.config.schedule import (
    CONCURRENT_KEYS,
    SCHEDULE_KEYS,
    SCHEDULES,
    VLLM_SERVE_MAX_NUM_BATCHED_TOKENS,
    check_schedule,
)
from analyzer.config.step_time import Efficiency, default_efficiency
from analyzer.errors import ConfigError

GROUPS = ("full_attention", "sliding_window", "mamba")
STEP_MODELS = ("auto", "linear", "roofline", "aic")
STEP_DEFAULTS = {"step_model": "auto", "gpu": None, "tensor_parallel": 1, "step_efficiency": ()}
SPEC_DECODE = ("none", "eagle_lookahead", "eagle_drop")
ROUTING = ROUTER_NAMES  # the router table (analyzer/config/routers.py)
# One cache per model revision on each replica (as deployments run), or one shared by all
# revisions (to ask what a single deployment for the whole traffic would reuse).
CACHE_SCOPES = ("revision", "shared")
CHOICES = {
    "groups": GROUPS,
    "spec_decode": SPEC_DECODE,
    "routing": ROUTING,
    "schedule": SCHEDULES,
    "cache_scope": CACHE_SCOPES,
    "step_model": STEP_MODELS,
}
MINIMUMS = {  # integer keys (null allowed but for replicas) and their smallest value
    "block_size": 1,
    "prefix_match_unit": 1,
    "retention_interval": 0,
    "sliding_window": 1,
    "max_num_batched_tokens": 1,
    "num_blocks": 2,
    "replicas": 1,
    "tensor_parallel": 1,
}
# The replay's block pool holds a few Python objects per block: 2^24 blocks (16.7 M, far above
# any GPU's pool) is about 2 GB; beyond it a pool is a MemoryError, not an answer. Token sizes
# stay below 2^31 (prompt lengths are int32, positions int64 sums of them); each replica has
# its own pool, so 2^16 of them is already far past any deployment.
MAX_TOKENS = (1 << 31) - 1
MAXIMUMS = {
    "num_blocks": 1 << 24,
    "replicas": 1 << 16,
    "tensor_parallel": 64,
    **{k: MAX_TOKENS for k in MINIMUMS if k not in ("num_blocks", "replicas", "tensor_parallel")},
}


@dataclass(frozen=True, kw_only=True)
class Policy:
    """One replay configuration; all sizes in tokens, `num_blocks` in pool blocks."""

    engine: str = "vllm"
    groups: tuple[str, ...] = ("full_attention", "mamba")
    block_size: int | None = None
    prefix_match_unit: int | None = None
    retention_interval: int | None = 0
    sliding_window: int | None = None
    # vllm serve's default (schedule.py); null = a prompt is one chunk (serial)
    max_num_batched_tokens: int | None = VLLM_SERVE_MAX_NUM_BATCHED_TOKENS
    num_blocks: int | None = None
    spec_decode: str = "none"
    replicas: int = 1
    routing: str = "trace"
    cache_scope: str = "revision"
    model: str | None = None
    # The schedule (analyzer/config/schedule.py); the other five keys are the concurrent one's.
    schedule: str = "serial"
    max_num_seqs: int = CONCURRENT_KEYS["max_num_seqs"].default
    step_base_ms: float = CONCURRENT_KEYS["step_base_ms"].default
    step_token_us: float = CONCURRENT_KEYS["step_token_us"].default
    time_scale: float = CONCURRENT_KEYS["time_scale"].default
    async_scheduling: bool = CONCURRENT_KEYS["async_scheduling"].default
    # The step's time from the model and the GPU (analyzer/config/step_models.py): auto is
    # the roofline when a GPU is named, else step_base_ms + step_token_us per token.
    step_model: str = "auto"
    gpu: str | None = None
    tensor_parallel: int = 1
    # The roofline's efficiency factors that differ from the GPU's defaults (`hpa calibrate`
    # fits them): (field of step_time.Efficiency, value), sorted.
    step_efficiency: tuple[tuple[str, float], ...] = ()
    options: tuple[tuple[str, Any], ...] = ()  # the engine's options (analyzer/config/options.py)
    # A live router's knobs (analyzer/config/routers.py); () for a static one.
    router_options: tuple[tuple[str, Any], ...] = ()

    def router_option(self, key: str) -> Any:
        """The value of router knob `key` (KeyError when the policy's router has none)."""
        return dict(self.router_options)[key]

    @property
    def step_time(self) -> str:
        """The step model in force: linear, roofline or aic (auto: roofline with a gpu)."""
        if self.step_model == "auto":
            return "roofline" if self.gpu is not None else "linear"
        return self.step_model

    @property
    def live_routing(self) -> bool:
        """Whether the router reads the replicas' state: the fleet replays on one clock (a
        router that can also run load-blind does so under the serial schedule)."""
        row = router(self.routing)
        return row.live and not (row.serial_static and self.schedule == "serial")

    def option(self, key: str) -> Any:
        """The value of engine option `key` (its default when the policy did not set it)."""
        for name, value in self.options:
            if name == key:
                return value
        if key in OPTIONS and OPTIONS[key].engine == self.engine:
            return OPTIONS[key].default
        raise KeyError(f"engine {self.engine} has no option {key!r}")

    @property
    def hash_block_tokens(self) -> int:
        """The prefix match unit in tokens (defaults to the block size)."""
        return self.prefix_match_unit or self.block_size

    @property
    def step_token_budget(self) -> int | None:
        """The scheduler's token budget per step: `max_num_batched_tokens` (by default
        `vllm serve`'s 8192), which under the concurrent schedule is that same 8192 when
        null (a serial replay sees the key as is: null = a prompt is one chunk)."""
        if self.max_num_batched_tokens is None and self.schedule == "concurrent":
            return VLLM_SERVE_MAX_NUM_BATCHED_TOKENS
        return self.max_num_batched_tokens

    def to_json(self) -> str:
        """Canonical JSON (sorted keys): stored with every run and part of its identity. A
        serial policy leaves the schedule keys out, so its identity predates them."""
        values = asdict(self)
        if self.schedule == "serial":
            for key in SCHEDULE_KEYS:
                del values[key]
        if self.cache_scope == "revision":
            del values["cache_scope"]  # the default, left out like the serial schedule
        for key, default in STEP_DEFAULTS.items():  # left out at their defaults, as above
            if values[key] == default:
                del values[key]
        if self.step_time != "linear":  # the linear step's keys do not apply
            del values["step_base_ms"], values["step_token_us"]
        if "step_efficiency" in values:
            values["step_efficiency"] = dict(values["step_efficiency"])
        values.update(values.pop("options"))  # flat, as the user writes them
        values.update(values.pop("router_options"))  # () for a static router: as before
        return json.dumps(values, sort_keys=True, separators=(",", ":"))


BASE_KEYS = tuple(f.name for f in fields(Policy) if f.name not in ("options", "router_options"))
KEYS = BASE_KEYS + tuple(OPTIONS) + ROUTER_KEYS

# The Policy's keys as `hpa replay --help` groups them (the routers' knobs: routing_help).
KEY_GROUPS = {
    "cache": (
        "engine", "model", "groups", "block_size", "prefix_match_unit", "retention_interval",
        "sliding_window", "num_blocks", "spec_decode", "cache_scope",
    ),
    "fleet": ("replicas", "routing"),
    "schedule": ("schedule", "max_num_batched_tokens"),
    "concurrent clock": tuple(CONCURRENT_KEYS),
    "step time (concurrent)": ("step_model", "gpu", "tensor_parallel", "step_efficiency"),
}  # fmt: skip
# What a default means where its value alone does not say.
_DEFAULT_NOTES = {
    "block_size": "the model preset's",
    "num_blocks": "unbounded",
    "max_num_batched_tokens": "or the gpu's",
    "max_num_seqs": "or the gpu's",
    "step_efficiency": "the gpu's factors",
}


def unknown_key(key: str) -> str:
    """The message for an unknown policy key: the closest known one where one is close
    (`did you mean 'replicas'?`), else every known key."""
    close = difflib.get_close_matches(key, KEYS, n=1, cutoff=0.6)
    if close:
        return (
            f"unknown policy key {key!r}; did you mean {close[0]!r}? (hpa replay --help "
            "lists every key)"
        )
    return f"unknown policy key {key!r}; known: {', '.join(KEYS)}"


def _default(key: str, value: Any) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    elif isinstance(value, tuple | list):
        text = "[" + ",".join(str(v) for v in value) + "]" if value else "{}"
    else:
        text = str(value)
    note = _DEFAULT_NOTES.get(key)
    return f"{key}={text}" + (f" ({note})" if note else "")


def policy_help() -> str:
    """Every policy key but the routers' knobs, grouped, with its default, for the `--help`
    of the commands that build a policy (click epilog; `routing_help` lists the routers)."""
    defaults = asdict(Policy())
    lines = ["\b", "Policy keys (--set KEY=VALUE; defaults; docs/engines.md#replay-policies):"]
    rows = [(name, [_default(k, defaults[k]) for k in keys]) for name, keys in KEY_GROUPS.items()]
    engines = dict.fromkeys(o.engine for o in OPTIONS.values())
    for engine in engines:
        knobs = [_default(k, o.default) for k, o in OPTIONS.items() if o.engine == engine]
        rows.append((f"{engine} only", knobs))
    for name, knobs in rows:
        text = f"{name}: {', '.join(knobs)}"
        lines += textwrap.wrap(text, 78, initial_indent="  ", subsequent_indent="      ")
    return "\n".join(lines)


def _integer(values: dict[str, Any], key: str) -> int | None:
    """`values[key]`: null, or an integer of at least MINIMUMS[key] (and at most
    MAXIMUMS[key], where the replay would otherwise run out of memory or overflow)."""
    value, minimum = values[key], MINIMUMS[key]
    if value is None:
        return None
    maximum = MAXIMUMS.get(key)
    if type(value) is int and maximum is not None and value > maximum:
        raise ConfigError(
            f"policy key {key!r}: expected an integer <= {maximum:,} or null, got {value!r}"
        )
    if type(value) is not int or value < minimum:
        raise ConfigError(
            f"policy key {key!r}: expected an integer >= {minimum} or null, got {value!r}"
        )
    return value


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"policy key {key!r}: {value!r} is not one of {', '.join(allowed)}")
    return value


def build_policy(values: dict[str, Any]) -> Policy:
    """A Policy from a dict of policy keys (model preset fills block_size), every key and
    value validated; whether its engine can replay it is `analyzer.sim.dispatch.make_policy`'s
    question (the engine's own checks live with the engine)."""
    unknown = sorted(set(values) - set(KEYS))
    if unknown:
        raise ConfigError(unknown_key(unknown[0]))
    base = {k: v for k, v in values.items() if k not in OPTIONS and k not in ROUTER_KEYS}
    v = {**asdict(Policy()), **_batch_defaults(base), **base}
    groups = v["groups"]
    if isinstance(groups, str):
        groups = [groups]
    if not isinstance(groups, list | tuple) or not groups:
        raise ConfigError(f"policy key 'groups': expected a list of {', '.join(GROUPS)}")
    groups = tuple(_choice("groups", g, GROUPS) for g in groups)
    if len(set(groups)) != len(groups) or "full_attention" not in groups:
        raise ConfigError("policy key 'groups': each group once, full_attention included")
    groups = tuple(g for g in GROUPS if g in groups)  # canonical order: FA first
    model = load_model(v["model"]) if v["model"] is not None else None
    block_size = _integer(v, "block_size")
    if block_size is None and model is not None:
        block_size = model["block_size"]
    if block_size is None:
        raise ConfigError(
            "policy key 'block_size': required, or give 'model' (a preset: "
            f"{', '.join(model_names())}; or a config.json), e.g. --set model={model_names()[0]}"
        )
    policy = Policy(
        engine=_choice("engine", v["engine"], ENGINE_NAMES),
        groups=groups,
        block_size=block_size,
        prefix_match_unit=_integer(v, "prefix_match_unit"),
        retention_interval=_integer(v, "retention_interval"),
        sliding_window=_integer(v, "sliding_window"),
        max_num_batched_tokens=_integer(v, "max_num_batched_tokens"),
        num_blocks=_integer(v, "num_blocks"),
        spec_decode=_choice("spec_decode", v["spec_decode"], SPEC_DECODE),
        replicas=_integer(v, "replicas") or 1,
        routing=_choice("routing", v["routing"], ROUTING),
        cache_scope=_choice("cache_scope", v["cache_scope"], CACHE_SCOPES),
        model=v["model"],
        **check_schedule({k: v[k] for k in SCHEDULE_KEYS}),
        step_model=_choice("step_model", v["step_model"], STEP_MODELS),
        gpu=_gpu(v["gpu"]),
        tensor_parallel=_integer(v, "tensor_parallel") or 1,
        step_efficiency=_step_efficiency(v["step_efficiency"]),
        options=resolve(v["engine"], {k: x for k, x in values.items() if k in OPTIONS}),
        router_options=resolve_router(
            v["routing"], {k: x for k, x in values.items() if k in ROUTER_KEYS}
        ),
    )
    _check_consistency(policy)
    # vLLM lays a Mamba state in one page of the shared pool (other engines keep states
    # in a pool of their own and page their KV as they like).
    unified = policy.engine == "vllm" and model is not None and "mamba" in model["groups"]
    if unified and "mamba" in groups:
        if block_size < model["block_size"]:
            raise ConfigError(
                f"policy key 'block_size': {block_size} is below {v['model']}'s smallest "
                f"block, {model['block_size']} tokens (a Mamba state must fit in one page)"
            )
    return policy


def efficiency(policy: Policy) -> Efficiency:
    """The roofline's efficiency factors: the GPU's defaults with the policy's own."""
    base = default_efficiency(GPUS[policy.gpu.lower()]).as_dict()
    return Efficiency(**{**base, **dict(policy.step_efficiency)})


def _batch_defaults(given: dict[str, Any]) -> dict[str, int]:
    """With a GPU named on the concurrent schedule, the batch keys `given` leaves out take
    `vllm serve`'s defaults on that GPU (`hardware.batch_defaults`); else the Policy's."""
    name = given.get("gpu")
    if given.get("schedule") != "concurrent" or not isinstance(name, str):
        return {}
    gpu = GPUS.get(name.lower())
    if gpu is None:
        return {}  # _gpu says which GPUs there are
    tokens, seqs = batch_defaults(gpu)
    return {"max_num_batched_tokens": tokens, "max_num_seqs": seqs}


def _gpu(value: Any) -> str | None:
    """A GPU of the table (its printed name), or None."""
    if value is None:
        return None
    if not isinstance(value, str) or value.lower() not in GPUS:
        raise ConfigError(f"policy key 'gpu': {value!r} is not one of {', '.join(GPU_NAMES)}")
    return GPUS[value.lower()].name


def _step_efficiency(value: Any) -> tuple[tuple[str, float], ...]:
    """An object of the roofline's efficiency factors (docs/latency.md), each a number."""
    known = tuple(f.name for f in fields(Efficiency))
    if isinstance(value, tuple):  # the default, or a policy's own (factor, value) pairs
        value = dict(value)
    if not isinstance(value, dict):
        raise ConfigError(
            f"policy key 'step_efficiency': expected an object of {', '.join(known)}, got {value!r}"
        )
    for key, x in value.items():
        if key not in known:
            raise ConfigError(
                f"policy key 'step_efficiency': unknown factor {key!r}; known: {', '.join(known)}"
            )
        if type(x) not in (int, float):
            raise ConfigError(f"policy key 'step_efficiency': {key} {x!r} is not a number")
    return tuple(sorted((k, float(x)) for k, x in value.items()))


def _check_step_model(p: Policy) -> None:
    """A step model from the model and the GPU needs both, and the concurrent schedule; it
    replaces step_base_ms and step_token_us, which then stay at their defaults."""
    if p.step_efficiency:
        if p.step_time != "roofline":
            raise ConfigError("policy key 'step_efficiency': the roofline's (give a gpu)")
        try:
            efficiency(p)  # each factor in its range
        except ConfigError as exc:
            raise ConfigError(f"policy key 'step_efficiency': {exc}") from None
    if p.step_time == "linear":
        if p.step_model == "linear" and p.gpu is not None:
            raise ConfigError("policy key 'gpu': step_model linear takes no GPU")
        if p.tensor_parallel != 1 and p.gpu is None:
            raise ConfigError("policy key 'tensor_parallel': give a gpu (the step model's)")
        return
    what = "gpu" if p.gpu is None else ("model" if p.model is None else None)
    if what is not None:
        raise ConfigError(
            f"policy key {what!r}: a step time from the model and the GPU needs both "
            "(--set model=... --set gpu=...)"
        )
    if p.schedule != "concurrent":
        raise ConfigError(
            "policy key 'gpu': a step time needs schedule: concurrent (a serial replay has "
            "no clock)"
        )
    for key in ("step_base_ms", "step_token_us"):
        if getattr(p, key) != CONCURRENT_KEYS[key].default:
            raise ConfigError(
                f"policy key {key!r}: the linear step's; with a gpu the step time comes from "
                "the model and the GPU (set step_model: linear without a gpu to use it)"
            )


def _check_consistency(p: Policy) -> None:
    _check_step_model(p)
    if p.live_routing and p.schedule != "concurrent":
        raise ConfigError(
            f"policy key 'routing': {p.routing} reads the replicas' load as requests arrive, "
            "so it needs schedule: concurrent (static routers: trace, round_robin, session)"
        )
    if p.schedule not in ENGINES[p.engine].schedules:
        raise ConfigError(
            f"policy key 'schedule': engine {p.engine} has no {p.schedule} replay; only "
            "vllm's scheduler is modelled"
        )
    if p.engine in BOUNDS and p.num_blocks is not None:
        raise ConfigError(
            f"policy key 'num_blocks': engine {p.engine} is an unbounded cache; use null"
        )
    unit = p.prefix_match_unit
    if unit is not None and p.block_size % unit:
        raise ConfigError(
            f"policy key 'prefix_match_unit': {unit} must divide block_size {p.block_size}"
        )
    if unit is not None and unit != p.block_size and p.groups == ("full_attention",):
        raise ConfigError(
            "policy key 'prefix_match_unit': a single full-attention group "
            "matches at its block size only (vLLM rejects other units)"
        )
    # Whether an interval is whole blocks is the replay's block's question, which a
    # hash-id trace can change (access.geometry.fit_policy checks it); none is, here.
    if p.retention_interval and p.groups == ("full_attention",):
        raise ConfigError(
            f"policy key 'retention_interval': {p.retention_interval} needs a sparse group "
            "(mamba or sliding_window) to retain; give 0 or null"
        )
    if ("sliding_window" in p.groups) != (p.sliding_window is not None):
        raise ConfigError(
            "policy key 'sliding_window': give a window exactly when groups include sliding_window"
        )


def parse_override(item: str) -> tuple[str, Any]:
    """`KEY=VALUE` from `--set`: VALUE is JSON (null, 0, [..]) or else a plain string."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
    if key not in KEYS:
        raise ConfigError(f"--set {item!r}: {unknown_key(key)}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw.split(",") if key == "groups" else raw
    return key, value


def policy_values(source: str | None, overrides: list[str] = ()) -> dict[str, Any]:
    """The policy keys of a preset name or a JSON/TOML/YAML file, then `--set` overrides."""
    values: dict[str, Any] = {}
    if source is not None:
        values = read_source(source)
    for item in overrides:
        key, value = parse_override(item)
        values[key] = value
    return values


def presets() -> list[str]:
    """The policy presets there are (`analyzer/schemas/policies/`), sorted."""
    return preset_names("policies")


def read_source(source: str) -> dict[str, Any]:
    """The policy keys of a file (`.toml`, `.yaml`/`.yml`, else JSON: config.policy_files)
    or, when no such file exists, of the preset of that name."""
    path = Path(source)
    if not path.exists() and source not in presets():
        raise ConfigError(
            f"policy {source!r}: no such file or preset; presets: {', '.join(presets())}"
        )
    if path.exists():
        data = read_policy_file(path)
    else:
        data = parse_policy_text(preset_text("policies", source), source)
    if not isinstance(data, dict):
        raise ConfigError(f"policy {source}: expected an object of policy keys")
    for key in data:  # the file's own keys, named with it
        if key not in KEYS:
            raise ConfigError(f"policy {source}: {unknown_key(key)}")
    return data
