"""compare's tables (analyzer/metrics/attribution.py): the rate/mix split of each group's
contribution, and a closing sentence that agrees with the table on TTFT."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.metrics.attribution import FIGURES, SUMS, build_tables
from analyzer.metrics.ttft import TtftFit


def side(**groups) -> dict:
    """{(family, revision): sums} from family__revision=(requests, prompt, hit) keywords;
    the rest of the prompt is unshared."""
    out = {}
    for key, (requests, prompt, hit) in groups.items():
        row = dict.fromkeys(SUMS, 0)
        row.update(requests=requests, prompt_tokens=prompt, hit_tokens=hit)
        row["unshared_tokens"] = prompt - hit
        row["fresh_prefill_tokens"] = prompt - hit
        out[tuple(key.split("__"))] = row
    return out


def by_key(table) -> dict:
    return {(r["prompt_family"], r["model_revision"], r["figure"]): r for r in table.to_pylist()}


def test_a_group_whose_hit_ratio_fell_but_traffic_grew_is_split_into_rate_and_mix():
    # chat@new: 80% -> 59% hits (rate -21 points) while its share of queried tokens goes
    # from 20% to 60%; the overall ratio goes 36% -> 45.4% (mean 40.7%). chat@new stays above
    # it, so the traffic it gained raised the overall ratio: a positive mix effect larger
    # than the negative rate effect
    base = side(chat__new=(10, 2_000, 1_600), chat__old=(40, 8_000, 2_000))
    cur = side(chat__new=(30, 6_000, 3_540), chat__old=(20, 4_000, 1_000))
    _, causes, sentence = build_tables(base, cur, {})
    hit = by_key(causes)[("chat", "new", "hit")]
    assert hit["change_points"] == pytest.approx(-21.0)
    assert hit["contribution_points"] == pytest.approx(100 * (0.354 - 0.16 - 0.407 * 0.4))
    assert hit["rate_effect_points"] == pytest.approx(0.4 * -21.0)
    assert hit["mix_effect_points"] == pytest.approx((0.695 - 0.407) * 40.0)
    assert hit["rate_effect_points"] < 0 < hit["contribution_points"]
    total = by_key(causes)[("(all)", "(all)", "hit")]
    assert total["rate_effect_points"] + total["mix_effect_points"] == pytest.approx(
        total["change_points"]
    )
    assert "from the groups' own hit ratios" in sentence
    assert "from the traffic mix" in sentence


# Constructed incidents: (what happened, baseline and current as family__revision=(requests,
# prompt tokens, hit tokens), the sign of each group's hit contribution, rate and mix
# effects). The signs read as a person expects: a group that lost hits, or whose traffic grew
# while it hits less than the whole, pulled the ratio down.
SIGN_CASES = [
    (
        "one group fell, the traffic did not move",
        {"a__r": (5, 500, 450), "b__r": (5, 500, 400)},
        {"a__r": (5, 500, 450), "b__r": (5, 500, 300)},
        {("a", "r"): ("0", "0", "0"), ("b", "r"): ("-", "-", "0")},
    ),
    (
        "the incident's group fell and grew, below the overall ratio",
        {"a__r": (5, 500, 450), "b__r": (5, 500, 350)},
        {"a__r": (2, 200, 180), "b__r": (8, 800, 400)},
        {("a", "r"): ("-", "0", "-"), ("b", "r"): ("-", "-", "-")},
    ),
    (
        "traffic moved to the group that hits more",
        {"a__r": (5, 500, 450), "b__r": (5, 500, 250)},
        {"a__r": (8, 800, 720), "b__r": (2, 200, 100)},
        {("a", "r"): ("+", "0", "+"), ("b", "r"): ("+", "0", "+")},
    ),
    (
        "a new group that hits less than the whole",
        {"a__r": (5, 500, 400)},
        {"a__r": (5, 500, 400), "c__r": (5, 500, 100)},
        # a's share of the traffic halved at a ratio above the whole's: it pulled down too
        {("a", "r"): ("-", "0", "-"), ("c", "r"): ("-", "0", "-")},
    ),
]


def _sign(x: float) -> str:
    return "0" if abs(x) < 1e-12 else ("+" if x > 0 else "-")


@pytest.mark.parametrize(
    ("base", "cur", "signs"), [c[1:] for c in SIGN_CASES], ids=[c[0] for c in SIGN_CASES]
)
def test_the_signs_of_each_groups_hit_contribution(base, cur, signs):
    _, causes, _ = build_tables(side(**base), side(**cur), {})
    rows = by_key(causes)
    for key, want in signs.items():
        hit = rows[(*key, "hit")]
        got = tuple(
            _sign(hit[f])
            for f in ("contribution_points", "rate_effect_points", "mix_effect_points")
        )
        assert got == want, key
    finest = [r for k, r in rows.items() if k[2] == "hit" and "(all)" not in k[:2]]
    total = rows[("(all)", "(all)", "hit")]
    assert math.fsum(r["contribution_points"] for r in finest) == pytest.approx(
        total["change_points"], abs=1e-9
    )


def test_a_group_on_one_side_only_is_all_mix():
    base = side(a__r=(1, 100, 50))
    cur = side(a__r=(1, 100, 50), b__r=(1, 100, 100))
    _, causes, _ = build_tables(base, cur, {})
    b = by_key(causes)[("b", "r", "hit")]
    # the overall ratio goes 50% -> 75% (mean 62.5%): b's half of the traffic at 100%
    assert (b["rate_effect_points"], b["mix_effect_points"]) == (0.0, pytest.approx(18.75))


counts = st.tuples(st.integers(1, 5), st.integers(1, 1_000), st.floats(0, 1))


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["f1__a", "f1__b", "f2__a", "f3__c"]), counts, min_size=1),
    st.dictionaries(st.sampled_from(["f1__a", "f1__b", "f2__a", "f3__c"]), counts, min_size=1),
)
def test_rate_plus_mix_is_the_contribution_and_adds_up_to_the_overall_change(b, c):
    def make(groups):
        return side(**{k: (n, q, round(q * f)) for k, (n, q, f) in groups.items()})

    _, causes, _ = build_tables(make(b), make(c), {})
    rows = causes.to_pylist()
    for r in rows:
        assert r["rate_effect_points"] + r["mix_effect_points"] == pytest.approx(
            r["contribution_points"], abs=1e-9
        )
    for fig, _, _ in FIGURES:
        finest = [r for r in rows if r["figure"] == fig and "(all)" not in r["model_revision"]]
        top = [r for r in rows if r["figure"] == fig][-1]
        overall = 100 * (top["current_share"] - top["baseline_share"])
        assert math.fsum(r["contribution_points"] for r in finest) == pytest.approx(
            overall, abs=1e-9
        )


def test_the_sentence_gives_the_ttft_change_of_the_revisions_that_have_one():
    base = side(chat__a=(10, 1_000, 500), chat__b=(10, 1_000, 500))
    cur = side(chat__a=(10, 1_000, 250), chat__b=(10, 1_000, 500))
    fits = {"a": TtftFit(100.0, 0.1, 0.9, 100)}  # b's fit did not pass the threshold
    groups, _, sentence = build_tables(base, cur, fits)
    rows = {(g["prompt_family"], g["model_revision"]): g for g in groups.to_pylist()}
    # 25 more fresh tokens per request x 0.1 ms per token
    assert rows[("chat", "a")]["est_ttft_change_ms"] == pytest.approx(2.5)
    assert rows[("(all)", "(all)")]["est_ttft_change_ms"] is None
    assert sentence.endswith("; estimated TTFT per request: a +2.5 ms; unavailable for b.")


def _losing(cause_column: str, tokens: int) -> dict:
    """One group, half its prompt hits; the window moves `tokens` of hits to one cause."""
    row = side(chat__r=(10, 1_000, 500))
    moved = side(chat__r=(10, 1_000, 500 - tokens))
    moved[("chat", "r")]["unshared_tokens"] = 500
    moved[("chat", "r")][cause_column] += tokens
    return row, moved


@pytest.mark.parametrize(
    ("column", "lever"),
    [
        ("lost_eviction_tokens", "; the lever: the pool size (num_blocks): `hpa plan "
         "--target-useful-hit-ratio 0.500` sizes the pool that reaches the baseline's ratio "
         "again"),
        ("lost_granularity_tokens", "; the lever: the block size (block_size) or the match "
         "unit (prefix_match_unit): vLLM matches a prefix shared inside earlier prompts in "
         "whole blocks, a finer unit only where an earlier prompt ended"),
        ("sparse_retention_miss_tokens", "; the lever: the retention interval "
         "(retention_interval) or the prefill chunking (max_num_batched_tokens)"),
        ("lost_routing_tokens", "; the lever: the routing policy (routing=prefix_aware"),
        ("unshared_tokens", "; no setting recovers it (the traffic shares less)"),
    ],
)  # fmt: skip
def test_the_sentence_ends_with_the_lever_for_the_cause_that_grew(column, lever):
    """(issue 33 item 4)"""
    base, cur = _losing(column, 100)
    _, _, sentence = build_tables(base, cur, {})
    assert sentence.startswith("useful hit ratio fell 10.0 points (50.0% -> 40.0%")
    assert lever in sentence, sentence


@pytest.mark.parametrize(("value", "said"), [(-0.01, "+0.0"), (0.04, "+0.0"), (-0.06, "-0.1"),
                                             (2.345, "+2.3")])  # fmt: skip
def test_a_change_that_rounds_to_zero_is_never_minus_zero(value, said):
    from analyzer.metrics.attribution import _signed

    assert _signed(value) == said


@pytest.mark.parametrize(
    ("column", "traffic", "clause"),
    [
        (
            "lost_eviction_tokens",
            {"p90_prompt_tokens": 37.26, "mean_prompt_tokens": 11.8, "requests_per_s": 50.0},
            " with more to hold in the same pool (p90 prompt tokens +37.3%, mean prompt "
            "tokens +11.8%)",
        ),
        (
            "lost_eviction_tokens",
            {"p90_prompt_tokens": 9.9, "conversations": 12.0},
            " with more to hold in the same pool (conversations +12.0%)",
        ),
        ("lost_eviction_tokens", {"p90_prompt_tokens": 9.9, "mean_prompt_tokens": -20.0}, None),
        ("lost_eviction_tokens", {"p90_prompt_tokens": None}, None),
        (
            "lost_in_flight_tokens",
            {"requests_per_s": 25.0},
            " with more requests at once (requests per second +25.0%)",
        ),
        ("unshared_tokens", {"conversations": 40.0}, " with new prefixes (conversations +40.0%)"),
        ("lost_granularity_tokens", {"p90_prompt_tokens": 50.0}, None),  # no traffic explains it
    ],
)
def test_the_sentence_ties_the_cause_to_the_traffic_that_explains_it(column, traffic, clause):
    """(issue 47 item 2: WEKA's p90 prompt length +37% in the window beside evictions up)"""
    base, cur = _losing(column, 100)
    _, _, sentence = build_tables(base, cur, {}, traffic)
    cause_end = sentence.index("points of queried tokens)") + len("points of queried tokens)")
    if clause is None:
        assert " with " not in sentence, sentence
    else:
        assert sentence[cause_end:].startswith(clause), sentence
    # the same traffic beside a ratio that rose names none
    _, _, rose = build_tables(cur, base, {}, traffic)
    assert " with " not in rose
