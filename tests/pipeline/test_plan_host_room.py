"""The plan's replays with a host tier that it need not make (`Evaluator.measure`): a tier of
the same slots as one replayed (`host_tier_gib` 0.32 and 0.3113 hold the same 25), and a
tier at least as large as the slots a replay of a larger one took without evicting
(`host_tier.slots_used`). Their figures are those of the replay, and the search for the
smallest tier (`host.smallest_tier`) answers as the plain search does, in fewer replays."""

from __future__ import annotations

import pytest

from analyzer.access.trace import load_trace
from analyzer.config.host_tier import GIB, chunk_bytes
from analyzer.config.memory import bytes_per_block
from analyzer.pipeline.plan import Evaluator, evaluate
from analyzer.pipeline.plan.evaluate import Targets
from analyzer.pipeline.plan.host import smallest_tier
from analyzer.sim.dispatch import make_policy
from analyzer.sim.vllm.host_tier import slots_used, tiers_built
from analyzer.store.db import connect
from analyzer.store.ingest import ingest
from tests.conftest import write_jsonl
from tests.host_trace import rotating_records

MODEL = "qwen3.5-4b"
BLOCK = 528  # its block
SLOT = chunk_bytes(bytes_per_block(MODEL, BLOCK))
SCHEDULES = {  # (policy keys, targets): serial, and concurrent under a TTFT p99 target
    "serial": ({}, Targets(0.5)),
    "concurrent": (
        {"schedule": "concurrent", "async_scheduling": False, "time_scale": 0.1},
        Targets(0.5, ttft_p99_s=1.0),  # (met from 0.5 GiB on: 0.599 s)
    ),
}


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """Four documents of four blocks asked in turn, twelve times each: a GPU pool of 12
    blocks keeps none of them for its next turn, a host tier of all four gives them back."""
    tmp = tmp_path_factory.mktemp("room")
    records = rotating_records(48, block=BLOCK)
    db = tmp / "t.duckdb"
    ingest([write_jsonl(tmp / "t.jsonl", records)], db_path=db)
    con = connect(db, create=False)
    try:
        return load_trace(con)
    finally:
        con.close()


def _with_tier(schedule: str):
    keys = SCHEDULES[schedule][0]
    return lambda gib: make_policy({"model": MODEL, "num_blocks": 12, **keys, "host_tier_gib": gib})


def _same(a, b) -> bool:
    """Equal figures (a replay cut short has a nan ratio)."""
    return a.stopped == b.stopped and (a.stopped and a.load == b.load or a == b)


def _plain(monkeypatch) -> None:
    """The evaluator as without the shortcuts: a tier's key is its GiB, nothing is roomy."""
    monkeypatch.setattr(evaluate, "_slots", lambda policy: None)


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_a_tier_no_smaller_than_a_roomy_ones_slots_is_not_replayed(trace, schedule):
    with_tier, targets = _with_tier(schedule), SCHEDULES[schedule][1]
    with tiers_built() as tiers:
        Evaluator(trace, None, targets=targets).measure(with_tier(8.0))
    used = slots_used(tiers)
    assert used is not None and 4 < used < 8 * GIB // SLOT
    ev = Evaluator(trace, None, targets=targets)
    ev.measure(with_tier(8.0), stop_early=True)  # as the plan's searches ask
    for slots in (used + 40, used + 1, used, used - 1, used // 2):
        gib = slots * SLOT / GIB
        before = ev.replays
        m = ev.measure(with_tier(gib), stop_early=True)
        assert ev.replays == before + (slots < used), slots
        fresh = Evaluator(trace, None, targets=targets)
        assert _same(m, fresh.measure(with_tier(gib), stop_early=True)), slots
        # the same slots said in more GiB: the replay above, not another
        assert ev.measure(with_tier(gib + 0.5 * SLOT / GIB), stop_early=True) is m
        assert ev.replays == before + (slots < used)


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_the_smallest_tier_is_the_plain_searchs(trace, schedule, monkeypatch):
    with_tier, targets = _with_tier(schedule), SCHEDULES[schedule][1]

    def search() -> tuple[tuple, int]:
        ev = Evaluator(trace, None, targets=targets)
        ev.measure(with_tier(8.0))  # the setting met with the whole budget, as the plan has it
        found = smallest_tier(ev, with_tier, targets, SLOT, 8.0, stop_early=True)
        return found, ev.replays

    found, replays = search()
    with monkeypatch.context() as patch:
        _plain(patch)
        plain, plain_replays = search()
    assert found == plain and 0 < found[0] < 8 * GIB // SLOT
    assert replays < plain_replays


def test_a_roomy_replay_unwatched_serves_a_watched_ask_only_where_it_met_the_ttft_target(trace):
    """A replay run to its end whose TTFT p99 missed the target: asked again to stop early
    (at a tier no smaller), it is replayed as asked (a watch might stop it), not taken."""
    with_tier = _with_tier("concurrent")
    targets = Targets(0.5, ttft_p99_s=0.55)  # 0.599 s with a tier of 0.5 GiB or more
    ev = Evaluator(trace, None, targets=targets)
    assert not ev.measure(with_tier(8.0)).meets(targets)  # unwatched
    at = ev.measure(with_tier(4.0))  # to its end, as asked: the roomy replay's figures
    assert ev.replays == 1 and at == ev.measure(with_tier(8.0))
    watched = ev.measure(with_tier(2.0), stop_early=True)
    assert ev.replays == 2
    fresh = Evaluator(trace, None, targets=targets)
    assert _same(watched, fresh.measure(with_tier(2.0), stop_early=True))
