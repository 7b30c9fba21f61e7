"""`hpa probe`: the seed article's diagnostic for a policy's own geometry, ready to send.

Families of three requests each, sent one after another (serially, so no in-flight
producer can explain a miss): a cold request, then two repeats that share a known prefix
with it and have different suffixes. The first family shares exactly two blocks (2B, the
article's 1,088 tokens at B=544); then, for each legal boundary of the policy (the block
boundary 2B, a match-unit boundary B+U when U < B, the retention interval N when N > 0),
one family whose prefix ends just before it (k-1) and one just after (k+1). Every request
of a family has k_boundary + 2B tokens (2,176 at B=544, as in docs/definitions.md#worked-examples).

    shared-1088/cold        0 / 0         (hits / sparse-retention misses, vllm-default, B=544)
    shared-1088/repeat-1    0 / 1,088     attention matched, no Mamba state there
    shared-1088/repeat-2    1,088 / 0     the junction was learned

Token ids are drawn with `random.Random(seed)` from [1000, 30000). Families are isolated:
each starts with its own first token, so no block hash of one can equal one of another.
Within a family the three suffixes start with three distinct tokens, so the requests share
exactly the intended prefix. The expected counter deltas come from replaying these very
requests with `analyzer.sim.dispatch.replay` under the policy (one engine, serial, each request
sampling one token as `max_tokens: 1` does).

Files (deterministic byte for byte for the same policy, seed and model):
`probe.jsonl` (send order; `{"step", "body"}` with an OpenAI completions body),
`expected.csv` (per request: the replay's prefix_cache_queries / _hits /
_sparse_retention_misses deltas) and `trace.jsonl` (the same requests as canonical trace
records, `timestamp` = send index, for `hpa ingest`, `hpa replay` and `hpa validate`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa

from analyzer.access.geometry import check_retention
from analyzer.config.models import load_model
from analyzer.config.policy import Policy
from analyzer.errors import ConfigError, InputFileError
from analyzer.report.tables import render
from analyzer.sim.dispatch import replay
from analyzer.sim.records import SimRequest
from analyzer.store.export import check_out_folder, write_atomic

TOKEN_RANGE = (1000, 30000)  # [low, high): ordinary vocabulary ids in any modern tokenizer
ROLES = ("cold", "repeat-1", "repeat-2")
EXPECTED_SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("step", pa.string()),
        ("family", pa.string()),
        ("boundary", pa.string()),
        ("shared_prefix_tokens", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("prefix_cache_queries", pa.int64()),
        ("prefix_cache_hits", pa.int64()),
        ("prefix_cache_sparse_retention_misses", pa.int64()),
        ("attention_match_tokens", pa.int64()),
        ("junction_tokens", pa.int64()),
        ("error", pa.string()),
    ]
)


@dataclass(frozen=True)
class ProbeFamily:
    """Three requests sharing `prefix_tokens` tokens; each `prompt_tokens` long."""

    name: str
    boundary: str  # the boundary kind(s) the prefix is placed around: block, match_unit, ...
    prefix_tokens: int
    prompt_tokens: int


@dataclass(frozen=True)
class ProbeRequest:
    step: str  # "<family>/<role>"
    family: ProbeFamily
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class Probe:
    model: str
    seed: int
    policy: Policy
    requests: tuple[ProbeRequest, ...]
    expected: pa.Table  # EXPECTED_SCHEMA, one row per request in send order
    files: tuple[Path, ...]


def boundaries(policy: Policy) -> list[tuple[int, str]]:
    """(token position, kind) of the legal boundaries probed, ascending; kinds at the same
    position are joined by '+'."""
    B, U, R = policy.block_size, policy.hash_block_tokens, policy.retention_interval
    found: dict[int, list[str]] = {2 * B: ["block"]}
    if U < B:
        found.setdefault(B + U, []).append("match_unit")
    if R:
        found.setdefault(R, []).append("retention")
    return [(pos, "+".join(kinds)) for pos, kinds in sorted(found.items())]


def probe_families(policy: Policy) -> list[ProbeFamily]:
    """The shared-2B family, then a before (k-1) and an after (k+1) family per boundary k."""
    B = policy.block_size
    families = [ProbeFamily(f"shared-{2 * B}", "block", 2 * B, 4 * B)]
    for pos, kind in boundaries(policy):
        for side, prefix in (("before", pos - 1), ("after", pos + 1)):
            if prefix >= 1:
                families.append(ProbeFamily(f"{kind}-{side}-{prefix}", kind, prefix, pos + 2 * B))
    return families


def design_requests(policy: Policy, seed: int) -> list[ProbeRequest]:
    """The probe's requests in send order, token ids deterministic from `seed`."""
    rng = random.Random(seed)
    low, high = TOKEN_RANGE
    families = probe_families(policy)
    firsts = rng.sample(range(low, high), len(families))
    out = []
    for family, first in zip(families, firsts, strict=True):
        p, n = family.prefix_tokens, family.prompt_tokens
        prefix = [first] + [rng.randrange(low, high) for _ in range(p - 1)]
        forks = rng.sample(range(low, high), len(ROLES))
        for role, fork in zip(ROLES, forks, strict=True):
            suffix = [fork] + [rng.randrange(low, high) for _ in range(n - p - 1)]
            out.append(ProbeRequest(f"{family.name}/{role}", family, tuple(prefix + suffix)))
    return out


def expected_deltas(requests: list[ProbeRequest], policy: Policy) -> pa.Table:
    """Per request, the replay's counter deltas (one engine, serial, one sampled token)."""
    sim = [
        SimRequest(request_id=r.step, prompt_token_ids=np.asarray(r.token_ids), output_tokens=1)
        for r in requests
    ]
    num_groups = None
    if policy.model is not None:
        preset = load_model(policy.model)["num_groups"]
        num_groups = {group: preset.get(group, 1) for group in policy.groups}
    results = list(replay(sim, policy, num_groups=num_groups))
    rows = [
        {
            "seq": i,
            "step": r.step,
            "family": r.family.name,
            "boundary": r.family.boundary,
            "shared_prefix_tokens": 0 if r.step.endswith("/cold") else r.family.prefix_tokens,
            "prompt_tokens": len(r.token_ids),
            "prefix_cache_queries": res.prompt_tokens,
            "prefix_cache_hits": res.hit_tokens,
            "prefix_cache_sparse_retention_misses": res.sparse_retention_miss_tokens,
            "attention_match_tokens": res.attention_match_tokens,
            "junction_tokens": res.junction_tokens,
            "error": res.error,
        }
        for i, (r, res) in enumerate(zip(requests, results, strict=True), start=1)
    ]
    return pa.Table.from_pylist(rows, EXPECTED_SCHEMA)


def write_probe(
    policy: Policy, out_dir: str | Path, *, seed: int = 0, model: str | None = None
) -> Probe:
    """Design the probe for `policy`, replay it, and write probe.jsonl, expected.csv and
    trace.jsonl under `out_dir` (created, but not the folders above it). `model` is the
    served model name put in each body (default: the policy's model preset).

    Raises:
        ConfigError: no model name, or a retention interval that is not whole blocks.
            InputFileError: `out_dir`'s parent folder does not exist, or `out_dir` cannot
            be written.
    """
    out = check_out_folder(out_dir)
    check_retention(policy)  # its requests are token ids: the policy's own block
    model = model if model is not None else policy.model
    if not model:
        raise ConfigError("--model: give the served model name (the policy names no model)")
    requests = design_requests(policy, seed)
    expected = expected_deltas(requests, policy)
    texts = {
        "probe.jsonl": b"".join(_line(r, model) for r in requests),
        "expected.csv": render(expected, "csv").encode(),
        "trace.jsonl": b"".join(_record(i, r, model) for i, r in enumerate(requests, start=1)),
    }
    try:
        out.mkdir(exist_ok=True)
    except OSError as exc:
        raise InputFileError(f"--out {out}: cannot make it ({exc.strerror or exc})") from None
    for name, data in texts.items():
        write_atomic(out / name, data, option="--out")
    files = tuple(out / name for name in texts)
    return Probe(model, seed, policy, tuple(requests), expected, files)


def _line(r: ProbeRequest, model: str) -> bytes:
    body = {"model": model, "prompt": list(r.token_ids), "max_tokens": 1, "temperature": 0}
    return orjson.dumps({"step": r.step, "body": body}) + b"\n"


def _record(seq: int, r: ProbeRequest, model: str) -> bytes:
    record = {
        "request_id": r.step,
        "timestamp": seq,
        "prompt_family": r.family.name,
        "model_revision": model,
        "prompt_token_ids": list(r.token_ids),
        "output_tokens": 1,
    }
    return orjson.dumps(record) + b"\n"


def send_hint(out_dir: str | Path, url: str = "http://localhost:8000") -> str:
    """A shell loop that sends the probe serially, saving /metrics before the first request
    and after each one (metrics-0.txt ... metrics-N.txt)."""
    d = Path(out_dir)
    return (
        f"i=0; curl -s {url}/metrics > {d}/metrics-0.txt; "
        f"jq -c .body {d}/probe.jsonl | while read -r body; do i=$((i+1)); "
        f"curl -s {url}/v1/completions -H 'Content-Type: application/json' "
        f'-d "$body" > /dev/null; curl -s {url}/metrics > {d}/metrics-$i.txt; done'
    )
