"""`hpa calibrate`'s spared replays (`calibrate._Scorer`: a point scored before is not
replayed again; a replay that only has to lose stops once its squared error reaches the error
to beat) give the search the answers of the plain one, which replays every point to its end:
the same points asked in the same order, each answered with the same error or, when cut
short, only where the plain replay's error is not below the bound; and so the same fit."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from analyzer.pipeline import calibrate as module
from analyzer.store.ingest import ingest
from tests.conftest import write_jsonl

BLOCK = 64
TIERLESS = [
    *("model=qwen3.5-4b", 'groups=["full_attention"]', f"block_size={BLOCK}"),
    "async_scheduling=false",
]
TIER = ["host_tier_gib=1", "host_bandwidth_gbps=0.1"]


def _records(n: int, *, seed: int, gap_s: float, missing=(), huge=()) -> list[dict]:
    """Three 8-block documents asked in turn, an 8-token tail each, `gap_s` apart, with a
    noisy observed TTFT (none for the indices in `missing`); those in `huge` ask 40 blocks
    (more than a 12-block pool holds: never scheduled, so never measured)."""
    rng = np.random.default_rng(seed)
    docs = [list(range(10_000 * d, 10_000 * d + 8 * BLOCK)) for d in range(3)]
    out = []
    for i in range(n):
        prompt = docs[i % 3] + [90_000 + 10 * i + k for k in range(8)]
        if i in huge:
            prompt = list(range(50_000, 50_000 + 40 * BLOCK))
        r = {"request_id": f"r{i}", "timestamp": i * gap_s, "prompt_token_ids": prompt}
        r["output_tokens"] = 3
        if i not in missing:
            r["ttft_ms"] = float(rng.uniform(20.0, 400.0))
        out.append(r)
    return out


CASES = {
    # the tier loads the documents the 12-block pool evicted; its idle waits join the lead
    "tier": (dict(n=7, seed=1, gap_s=0.25), [*TIERLESS, "num_blocks=12", *TIER]),
    "no tier": (dict(n=6, seed=2, gap_s=0.25), [*TIERLESS, "num_blocks=12"]),
    # vLLM's default loop: two steps in flight (no tier there)
    "async": (
        dict(n=6, seed=5, gap_s=0.02),
        [*TIERLESS[:-1], "async_scheduling=true", "num_blocks=12"],
    ),
    # arrivals close together: requests queue behind each other; two have no ttft_ms
    "crowded, unmeasured": (
        dict(n=8, seed=3, gap_s=0.01, missing={2, 6}),
        [*TIERLESS, "num_blocks=12", *TIER],
    ),
    # two replicas (each replayed on its own), one request never scheduled
    "replicas, unscheduled": (
        dict(n=8, seed=4, gap_s=0.05, huge={4}),
        [*TIERLESS, "num_blocks=12", *TIER, "replicas=2", "routing=round_robin"],
    ),
}


@pytest.fixture(scope="module")
def dbs(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for k, (name, (shape, _)) in enumerate(CASES.items()):
        tmp = tmp_path_factory.mktemp(f"bound{k}")
        db = tmp / "t.duckdb"
        ingest([write_jsonl(tmp / "t.jsonl", _records(**shape))], db_path=db)
        out[name] = db
    return out


def _calibrate(db: Path, overrides: list[str], spare: bool, monkeypatch) -> tuple:
    """The fit, and every point the search asked: (step_base_ms, step_token_us, the error
    to beat or None, the error answered or None for not below it)."""
    asked = []
    call = module._Scorer.__call__

    def recorded(self, x, above=None):
        e = call(self, x, above)
        key = tuple(round(float(v), 6) for v in np.exp(x))
        asked.append((*key, above, None if e is None else e[0].sse_ms2))
        return e

    with monkeypatch.context() as m:
        m.setattr(module._Scorer, "__call__", recorded)
        m.setattr(module._Scorer, "spare", spare)
        fit = module.calibrate(None, overrides, db_path=db)
    return fit, asked


@pytest.mark.parametrize("name", list(CASES))
def test_the_spared_search_is_the_plain_one(dbs, name, monkeypatch):
    overrides = CASES[name][1]
    plain, plain_asked = _calibrate(dbs[name], overrides, False, monkeypatch)
    spared, spared_asked = _calibrate(dbs[name], overrides, True, monkeypatch)
    assert [a[:2] for a in spared_asked] == [a[:2] for a in plain_asked]
    for (*_, above, error), (*_, _, truth) in zip(spared_asked, plain_asked, strict=True):
        if error is None:  # cut short: the plain replay's error is not below the bound
            assert truth >= above
        else:
            assert error == truth
    assert plain.full_replays == plain.replays and plain.cut_short == 0
    # the spared search replayed less, and cut some replays short
    assert spared.full_replays + spared.cut_short < spared.replays and spared.cut_short > 0
    same = ("full_replays", "cut_short")
    assert module.replace(spared, **{k: 0 for k in same}) == module.replace(
        plain, **{k: 0 for k in same}
    )
    assert spared.policy.to_json() == plain.policy.to_json()
    assert not math.isnan(spared.r2)
