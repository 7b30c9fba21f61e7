"""The loss waterfall with a host KV tier: the host hit takes prompt positions
[GPU hit, GPU hit + host hit) out of the causes whose spans hold them, so every cause is what
was recomputed and causes + hit (GPU + host) still sum to prompt_tokens."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.metrics.waterfall import CAUSES, WaterfallError, build_levels, sparse_split_net

# One request: 2,176 prompt tokens, 1,700 shared, 1,632 matchable (544-token blocks).
# (attention_match, sparse_miss, gpu hit, host hit) -> causes that change, and the hit.
CASES = [
    # no tier: the GPU alone (eviction 1,088)
    ((544, 0, 544, 0), {"lost_eviction_tokens": 1088}, 544),
    # the host gives back one evicted block of two
    ((544, 0, 544, 544), {"lost_eviction_tokens": 544}, 1088),
    # ... and both: nothing evicted is recomputed
    ((544, 0, 544, 1088), {"lost_eviction_tokens": 0}, 1632),
    # a hybrid: attention held 1,088, Mamba had state at 0 (sparse miss 1,088), evicted 544;
    # the host's 1,632 give back the sparse span first (nearest the GPU hit), then eviction
    ((1088, 1088, 0, 1632), {"lost_eviction_tokens": 0, "sparse_retention_miss_tokens": 0}, 1632),
    # the same, host 544: half the sparse span, none of the eviction
    (
        (1088, 1088, 0, 544),
        {"lost_eviction_tokens": 544, "sparse_retention_miss_tokens": 544},
        544,
    ),
    # EAGLE drop (spec decode 544) then evicted 544: the host's 544 gives the drop back
    ((1088, 0, 544, 544), {"lost_eviction_tokens": 544, "lost_spec_decode_tokens": 0}, 1088),
]


@pytest.mark.parametrize(("levels_in", "changed", "hit"), CASES)
def test_host_hit_is_taken_from_the_causes_it_covers(levels_in, changed, hit):
    attention, sparse, gpu, host = levels_in
    levels = build_levels(
        prompt_tokens=[2176],
        shared_any_tokens=[1700],
        shared_replica_tokens=[1700],
        align_tokens=544,
        attention_match_tokens=[attention],
        sparse_retention_miss_tokens=[sparse],
        hit_tokens=[gpu],
        host_hit_tokens=[host],
    )
    causes = {k: int(v[0]) for k, v in levels.causes().items()}
    gross = {k: int(v[0]) for k, v in levels.gpu_causes().items()}
    assert {k: causes[k] for k in changed} == changed
    assert causes["hit_tokens"] == hit
    assert causes["unshared_tokens"] == 476 and causes["lost_granularity_tokens"] == 68
    assert sum(causes[k] for k in CAUSES) + causes["hit_tokens"] == 2176
    back = {k: int(v[0]) for k, v in levels.won_back().items()}
    assert sum(back.values()) == host
    assert all(gross[k] - back[k] == causes[k] for k in CAUSES)


def test_no_tier_changes_nothing():
    """host_hit_tokens all 0 is no tier: the same causes as without the argument."""
    args = dict(
        prompt_tokens=[2176, 1500],
        shared_any_tokens=[1700, 1500],
        shared_replica_tokens=[1700, 1088],
        align_tokens=544,
        attention_match_tokens=[544, 1088],
        sparse_retention_miss_tokens=[0, 544],
        hit_tokens=[544, 544],
    )
    plain = build_levels(**args).causes()
    zero = build_levels(**args, host_hit_tokens=[0, 0]).causes()
    assert {k: v.tolist() for k, v in zero.items()} == {k: v.tolist() for k, v in plain.items()}


def test_host_hit_beyond_the_prompt_is_reported():
    with pytest.raises(WaterfallError, match="host_hit_tokens 2176 above the GPU hit 544"):
        build_levels(
            prompt_tokens=[2176],
            shared_any_tokens=[1700],
            shared_replica_tokens=[1700],
            align_tokens=544,
            attention_match_tokens=[544],
            sparse_retention_miss_tokens=[0],
            hit_tokens=[544],
            host_hit_tokens=[2176],
        )


@pytest.mark.parametrize(
    ("never", "evicted", "back", "net"),
    [
        (0, 544, 544, (0, 0)),
        (544, 544, 544, (544, 0)),
        (544, 544, 816, (272, 0)),
        (1088, 0, 544, (544, 0)),
        (0, 1088, 0, (0, 1088)),
    ],
)
def test_sparse_split_gives_back_the_evicted_part_first(never, evicted, back, net):
    got = sparse_split_net([never], [evicted], np.array([back]))
    assert (int(got[0][0]), int(got[1][0])) == net
