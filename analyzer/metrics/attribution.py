"""`hpa compare`'s tables: each side's figures as shares of its own queried tokens, per prompt
family x model revision with "(all)" roll-ups, the change between sides, each group's
contribution, and the one-sentence attribution (see analyzer/metrics/compare.py).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from analyzer.config.host_tier import NEVER_STORED
from analyzer.config.levers import lever
from analyzer.words import capped

ALL = "(all)"
NONE = "(none)"  # a NULL label in the tables; the sentence says "no family"

# (figure name, replay_requests column, words for the sentence), hit first, then the
# waterfall causes; the two sparse_retention_* splits are parts of sparse_retention.
FIGURES = (
    ("hit", "hit_tokens", "hits"),
    ("unshared", "unshared_tokens", "unshared prefixes"),
    ("routing", "lost_routing_tokens", "routing losses"),
    ("in_flight", "lost_in_flight_tokens", "prefixes still in flight"),
    ("granularity", "lost_granularity_tokens", "match-granularity losses"),
    ("eviction", "lost_eviction_tokens", "dense evictions"),
    ("sparse_retention", "sparse_retention_miss_tokens", "sparse-retention misses"),
    (
        "sparse_retention_never_kept",
        "sparse_retention_miss_never_kept_tokens",
        "sparse-retention misses (never kept)",
    ),
    (
        "sparse_retention_evicted",
        "sparse_retention_miss_evicted_tokens",
        "sparse-retention misses (evicted)",
    ),
    ("spec_decode", "lost_spec_decode_tokens", "speculative-decoding losses"),
)
CAUSES = (
    "unshared",
    "routing",
    "in_flight",
    "granularity",
    "eviction",
    "sparse_retention",
    "spec_decode",
)
SUMS = (
    "requests",
    "prompt_tokens",
    *(col for _, col, _ in FIGURES),
    "fresh_prefill_tokens",
    "ttft_requests",
    "ttft_ms_sum",
    "sim_requests",
    "sim_ttft_s_sum",
    "sim_queue_s_sum",
    "host_hit_tokens",
    "host_waited_requests",
    "host_wait_s_sum",
    "host_evicted_tokens",
    "host_never_stored_tokens",
    *(k.column for k in NEVER_STORED),
)
# The part of the hit a host KV tier loaded (docs/definitions.md#the-host-kv-tier): its rows
# follow the hit's where either side has any, and are left out elsewhere.
HOST_FIGURE = ("host_hit", "host_hit_tokens", "hits from the host KV tier")


def _add(into: dict, row: dict) -> None:
    for k in SUMS:
        into[k] = into.get(k, 0) + row.get(k, 0)


def _est_ttft_sum(by_rev: dict[str, dict], fits: dict) -> float | None:
    """Sum over requests of a_rev + b_rev * fresh (None if a revision has no fit)."""
    total = 0.0
    for rev, r in by_rev.items():
        if r["requests"] == 0:
            continue
        fit = fits.get(rev)
        if fit is None:
            return None
        total += fit.a_ms * r["requests"] + fit.b_ms_per_token * r["fresh_prefill_tokens"]
    return total


def build_tables(
    base: dict,
    cur: dict,
    fits: dict,
    traffic: dict[str, float | None] | None = None,
    plan: str = "hpa plan",
    pool: Callable[[float], str | None] | None = None,
    ttft_why: str | None = None,
) -> tuple[pa.Table, pa.Table, str]:
    """The groups and causes tables and the sentence; `traffic`: each traffic measure's
    change in percent (compare's traffic table), for the clause that ties a cause to it;
    `plan`: the `hpa plan` command the eviction lever prints, but its target (the
    database, model and window options compare knows); `pool(target)`: that plan's answer in
    words, where it is cheap enough to run (None: not run); `ttft_why`: why revisions have no
    TTFT estimate, said where the sentence names them."""
    keys = sorted(set(base) | set(cur))
    families = sorted({f for f, _ in keys})
    # group key -> side -> {revision: sums}; roll-ups keep per-revision parts for TTFT
    groups: list[tuple[str, str, list[tuple[str, str]]]] = []
    for fam in families:
        members = [k for k in keys if k[0] == fam]
        groups.extend((fam, rev, [(fam, rev)]) for _, rev in members)
        if len(members) > 1 and len(families) > 1:  # one family's roll-up is the total
            groups.append((fam, ALL, members))
    if len(keys) > 1:
        groups.append((ALL, ALL, keys))

    def parts(side: dict, members) -> dict[str, dict]:
        by_rev: dict[str, dict] = {}
        for k in members:
            if k in side:
                _add(by_rev.setdefault(k[1], {}), side[k])
        return by_rev

    def total(by_rev: dict[str, dict]) -> dict:
        out = dict.fromkeys(SUMS, 0)
        for r in by_rev.values():
            _add(out, r)
        return out

    everything = {"baseline": total(parts(base, keys)), "current": total(parts(cur, keys))}
    q_all = {name: sums["prompt_tokens"] for name, sums in everything.items()}
    # each figure's overall share, the mean of the two sides: what a group's traffic share
    # carries at the overall ratio (the shift-share's reference)
    overall_mean = {
        col: (_share(everything["baseline"][col], everything["baseline"]) or 0.0) / 2
        + (_share(everything["current"][col], everything["current"]) or 0.0) / 2
        for _, col, _ in (*FIGURES, HOST_FIGURE)
    }
    host = any(everything[side]["host_hit_tokens"] for side in everything)
    figures = (FIGURES[0], HOST_FIGURE, *FIGURES[1:]) if host else FIGURES
    g_rows, c_rows = [], []
    for fam, rev, members in groups:
        pb, pc = parts(base, members), parts(cur, members)
        tb, tc = total(pb), total(pc)
        hb, hc = _share(tb["hit_tokens"], tb), _share(tc["hit_tokens"], tc)
        eb, ec = _est_ttft_sum(pb, fits), _est_ttft_sum(pc, fits)
        est_b = eb / tb["requests"] if eb is not None and tb["requests"] else None
        est_c = ec / tc["requests"] if ec is not None and tc["requests"] else None
        g_rows.append(
            {
                "prompt_family": fam,
                "model_revision": rev,
                "baseline_requests": tb["requests"],
                "current_requests": tc["requests"],
                "baseline_prompt_tokens": tb["prompt_tokens"],
                "current_prompt_tokens": tc["prompt_tokens"],
                "baseline_useful_hit_ratio": hb,
                "current_useful_hit_ratio": hc,
                "change_points": _points(hc, hb),
                "baseline_est_ttft_ms": est_b,
                "current_est_ttft_ms": est_c,
                "est_ttft_change_ms": None if est_b is None or est_c is None else est_c - est_b,
                "baseline_observed_ttft_ms": _mean_ttft(tb),
                "current_observed_ttft_ms": _mean_ttft(tc),
                **_simulated(tb, tc),
            }
        )
        c_rows += _cause_rows(
            (fam, rev, members), (tb, tc), (base, cur), q_all, overall_mean, figures
        )
    g_table = pa.Table.from_pylist(g_rows, schema=_GROUP_SCHEMA)
    c_table = pa.Table.from_pylist(c_rows, schema=_CAUSE_SCHEMA)
    sentence = _sentence(g_rows, c_rows, traffic or {}, plan, pool, ttft_why)
    return g_table, c_table, sentence


def _cause_rows(
    group, totals, sides, q_all: dict, overall_mean: dict, figures=FIGURES
) -> list[dict]:
    """One group's causes rows: per figure its shares, change, contribution (against the
    overall share: a group whose traffic grew at the overall ratio contributes nothing) and
    its rate and mix effects."""
    fam, rev, members = group
    tb, tc = totals
    base, cur = sides
    moved = tc["prompt_tokens"] / q_all["current"] - tb["prompt_tokens"] / q_all["baseline"]
    rows = []
    for fig, col, _ in figures:
        sb, sc = _share(tb[col], tb), _share(tc[col], tc)
        rate, mix = _shift_share(base, cur, members, col, q_all, overall_mean[col])
        rows.append(
            {
                "prompt_family": fam,
                "model_revision": rev,
                "figure": fig,
                "baseline_tokens": tb[col],
                "baseline_share": sb,
                "current_tokens": tc[col],
                "current_share": sc,
                "change_points": _points(sc, sb),
                "contribution_points": 100.0
                * (
                    tc[col] / q_all["current"]
                    - tb[col] / q_all["baseline"]
                    - overall_mean[col] * moved
                ),
                "rate_effect_points": rate,
                "mix_effect_points": mix,
            }
        )
    return rows


def _shift_share(
    base: dict, cur: dict, members, col: str, q_all: dict, overall: float
) -> tuple[float, float]:
    """The group's contribution split into rate and mix effects, in points of the overall
    share (a symmetric shift-share over its family x revision members, against the overall
    share `overall`, the mean of the two sides).

    Per member k, with weight w = q_k / Q (its share of its side's queried tokens) and rate
    r = x_k / q_k (the figure's share of the member's own queried tokens): the contribution
    (w_c r_c - w_b r_b) - R (w_c - w_b) = mean(w) (r_c - r_b) [rate] + (mean(r) - R)
    (w_c - w_b) [mix], exactly. The weights' changes add up to zero over the groups, so the
    contributions still add up to the overall change; against R, more traffic to a group
    raises the overall share only when the group's share is above the overall one (a group
    whose hit ratio fell while its traffic grew, below the overall ratio, contributes a
    negative change twice). A member present on one side only has no rate change: all of it
    is mix, w (r - R) of the side it is on.
    """
    rate = mix = 0.0
    for k in members:
        sides = []
        for side, q in ((base, q_all["baseline"]), (cur, q_all["current"])):
            r = side.get(k)
            sides.append(
                (r["prompt_tokens"] / q, r[col] / r["prompt_tokens"])
                if r is not None and r["prompt_tokens"] and q
                else (0.0, None)
            )
        (wb, rb), (wc, rc) = sides
        if rb is not None and rc is not None:
            rate += (wb + wc) / 2 * (rc - rb)
            mix += ((rb + rc) / 2 - overall) * (wc - wb)
        else:
            mix += wc * ((rc or 0.0) - overall) - wb * ((rb or 0.0) - overall)
    return 100.0 * rate, 100.0 * mix


def _share(tokens: int, sums: dict) -> float | None:
    return tokens / sums["prompt_tokens"] if sums["prompt_tokens"] else None


def _points(new: float | None, old: float | None) -> float | None:
    return None if new is None or old is None else 100.0 * (new - old)


def _simulated(base: dict, cur: dict) -> dict[str, float | None]:
    """Mean simulated TTFT and queue time per side (concurrent runs), and their changes."""
    out: dict[str, float | None] = {}
    for name in ("ttft", "queue"):
        b, c = (_mean(s[f"sim_{name}_s_sum"], s["sim_requests"]) for s in (base, cur))
        out[f"baseline_sim_{name}_s"] = b
        out[f"current_sim_{name}_s"] = c
        out[f"sim_{name}_change_s"] = None if b is None or c is None else c - b
    return out


def _mean(total: float, count: int) -> float | None:
    return total / count if count else None


def _mean_ttft(sums: dict) -> float | None:
    return sums["ttft_ms_sum"] / sums["ttft_requests"] if sums["ttft_requests"] else None


def _label(fam: str, rev: str) -> str:
    """A group in words, as the report names it: 'chat @ rev', 'no family @ rev'; each
    label as the report shows it (`words.capped`: controls as \\x1b, 200 characters)."""
    fam = "no family" if fam == NONE else capped(fam)
    rev = "no revision" if rev == NONE else capped(rev)
    return f"{fam} (all model revisions)" if rev == ALL else f"{fam} @ {rev}"


def _attribution_groups(g_rows: list[dict]) -> list[dict]:
    """Groups present on both sides, finest first: a family x revision where every revision
    of that family is on both sides, else the family's "(all)" roll-up (when the revisions
    changed between the sides, only the family compares like with like)."""
    both = lambda g: g["baseline_requests"] > 0 and g["current_requests"] > 0  # noqa: E731
    out = []
    for fam in dict.fromkeys(g["prompt_family"] for g in g_rows if g["prompt_family"] != ALL):
        rows = [g for g in g_rows if g["prompt_family"] == fam]
        members = [g for g in rows if g["model_revision"] != ALL]
        if all(both(g) for g in members):
            out.extend(members)
        else:
            out.extend(g for g in rows if g["model_revision"] == ALL and both(g))
    return out


def _sentence(
    g_rows: list[dict], c_rows: list[dict], traffic: dict, plan: str, pool=None, ttft_why=None
) -> str:
    """One sentence: the overall hit change, its largest cause, and where that cause grew."""
    top = g_rows[-1]  # the "(all)" roll-up, or the single group
    hb, hc = top["baseline_useful_hit_ratio"], top["current_useful_hit_ratio"]
    change = top["change_points"]
    overall = {
        r["figure"]: r
        for r in c_rows
        if (r["prompt_family"], r["model_revision"])
        == (top["prompt_family"], top["model_revision"])
    }
    candidates = _attribution_groups(g_rows)
    by_group: dict[tuple[str, str], dict[str, dict]] = {}
    for r in c_rows:
        by_group.setdefault((r["prompt_family"], r["model_revision"]), {})[r["figure"]] = r
    words = {fig: w for fig, _, w in FIGURES}
    ratio = f"({100 * hb:.1f}% -> {100 * hc:.1f}% of queried tokens)"
    if abs(change) < 0.05:
        text = f"useful hit ratio unchanged {ratio}"
    else:
        sign = 1.0 if change < 0 else -1.0  # fell: causes that grew; rose: causes that shrank
        cause = max(CAUSES, key=lambda c: (sign * overall[c]["change_points"], -CAUSES.index(c)))
        cause_change = overall[cause]["change_points"]
        # Where: the group whose own share of this cause moved most, weighted by its mean
        # share of queried tokens (the rate effect, free of shifts in the traffic mix).
        q_b = top["baseline_prompt_tokens"]
        q_c = top["current_prompt_tokens"]
        weighted = []
        for i, g in enumerate(candidates):
            r = by_group[(g["prompt_family"], g["model_revision"])][cause]
            weight = (g["baseline_prompt_tokens"] / q_b + g["current_prompt_tokens"] / q_c) / 2
            weighted.append((sign * weight * r["change_points"], -i, r))  # ties: first group
        hit = overall["hit"]
        split = ""
        if len(g_rows) > 1:  # one group has no mix: its rate effect is the whole change
            split = (
                f"; {_signed(hit['rate_effect_points'])} from the groups' own hit ratios, "
                f"{_signed(hit['mix_effect_points'])} from the traffic mix"
            )
        text = (
            f"useful hit ratio {'fell' if change < 0 else 'rose'} {abs(change):.1f} points "
            f"{ratio[:-1]}{split}), mostly {words[cause]} "
            f"({_signed(cause_change)} points of queried tokens)"
        )
        if change < 0:
            text += _traffic_clause(cause, traffic)
        if weighted and len(candidates) > 1:
            score, _, where = max(weighted, key=lambda t: (t[0], t[1]))
            if score > 0 and abs(where["change_points"]) >= 0.05:  # said as +0.0 otherwise
                text += (
                    f", largest in {_label(where['prompt_family'], where['model_revision'])} "
                    f"({_signed(where['change_points'])} points of its queried tokens)"
                )
        if change < 0:
            text += _lever_clause(cause, hb, plan, pool)
    sim = top["sim_ttft_change_s"]
    if sim is not None:
        queue = top["sim_queue_change_s"]
        return text + (
            f"; simulated TTFT {sim:+.3f} s per request ({queue:+.3f} s of it queueing), "
            f"{top['baseline_sim_ttft_s']:.3f} s -> {top['current_sim_ttft_s']:.3f} s."
        )
    return text + _ttft_clause(top, g_rows, ttft_why) + "."


# The traffic that explains a cause when it grew: (cause, words, measures), a measure named
# when it grew by TRAFFIC_GREW_PERCENT or more. Longer prompts and more conversations at once
# hold more blocks in the same pool; more requests a second keep more prefixes in flight;
# more conversations bring prefixes nobody sent before.
TRAFFIC_CAUSES = {
    "eviction": (
        "more to hold in the same pool",
        (
            ("p90_prompt_tokens", "p90 prompt tokens"),
            ("mean_prompt_tokens", "mean prompt tokens"),
            ("conversations", "conversations"),
        ),
    ),
    "in_flight": ("more requests at once", (("requests_per_s", "requests per second"),)),
    "unshared": ("new prefixes", (("conversations", "conversations"),)),
}
TRAFFIC_GREW_PERCENT = 10.0


def _traffic_clause(cause: str, traffic: dict) -> str:
    """' with more to hold in the same pool (p90 prompt tokens +37.3%)' when the traffic
    measures that explain `cause` grew (compare's traffic table), else ''."""
    words, measures = TRAFFIC_CAUSES.get(cause, ("", ()))
    grew = [
        f"{name} {traffic[m]:+.1f}%"
        for m, name in measures
        if traffic.get(m) is not None and traffic[m] >= TRAFFIC_GREW_PERCENT
    ]
    return f" with {words} ({', '.join(grew)})" if grew else ""


def _signed(value: float) -> str:
    """'+1.2', '-0.4', and '+0.0' for what rounds to zero from either side (never '-0.0')."""
    return f"{round(value, 1) or 0.0:+.1f}"


def _lever_clause(cause: str, baseline_ratio: float, plan: str = "hpa plan", pool=None) -> str:
    """'; the lever: ...' for the cause that grew most (what a setting can do about it);
    for evictions the `plan` command (runnable as printed) that sizes the pool back."""
    column = next(col for fig, col, _ in FIGURES if fig == cause)
    setting = lever(column)
    if setting is None:
        return "; no setting recovers it (the traffic shares less)"
    if column == "lost_eviction_tokens":
        setting += (
            f": `{plan} --target-useful-hit-ratio {baseline_ratio:.3f}` sizes the pool that "
            "reaches the baseline's ratio again"
        )
        answer = None if pool is None else pool(round(baseline_ratio, 3))
        if answer:
            setting += f" ({answer})"
    return f"; the lever: {setting}"


def _ttft_clause(top: dict, g_rows: list[dict], why: str | None = None) -> str:
    """The estimated TTFT change overall; when only some revisions have one (a usable fit,
    requests on both sides), theirs one by one and the others named (as the table shows),
    with `why` where given."""
    est = top["est_ttft_change_ms"]
    if est is not None:
        return f"; estimated TTFT {_signed(est)} ms per request"
    revs = dict.fromkeys(g["model_revision"] for g in g_rows if g["model_revision"] != ALL)
    changes = {rev: _rev_change(g_rows, rev) for rev in revs}
    known = [f"{rev} {_signed(v)} ms" for rev, v in changes.items() if v is not None]
    because = f" ({why})" if why else ""
    if not known:
        return f"; TTFT change unavailable{because}"
    missing = ", ".join(rev for rev, v in changes.items() if v is None)
    return f"; estimated TTFT per request: {', '.join(known)}; unavailable for {missing}{because}"


def _rev_change(g_rows: list[dict], rev: str) -> float | None:
    """Mean estimated TTFT change (ms) of revision `rev`'s requests, current minus baseline;
    None without an estimate on a side that has its requests, or with none on a side."""
    sums = {"baseline": [0.0, 0], "current": [0.0, 0]}
    for g in g_rows:
        if g["model_revision"] != rev or g["prompt_family"] == ALL:
            continue
        for side, acc in sums.items():
            n, est = g[f"{side}_requests"], g[f"{side}_est_ttft_ms"]
            if n and est is None:
                return None
            if n:
                acc[0] += est * n
                acc[1] += n
    (tb, nb), (tc, nc) = sums["baseline"], sums["current"]
    return tc / nc - tb / nb if nb and nc else None


_GROUP_SCHEMA = pa.schema(
    [
        ("prompt_family", pa.string()),
        ("model_revision", pa.string()),
        ("baseline_requests", pa.int64()),
        ("current_requests", pa.int64()),
        ("baseline_prompt_tokens", pa.int64()),
        ("current_prompt_tokens", pa.int64()),
        ("baseline_useful_hit_ratio", pa.float64()),
        ("current_useful_hit_ratio", pa.float64()),
        ("change_points", pa.float64()),
        ("baseline_est_ttft_ms", pa.float64()),
        ("current_est_ttft_ms", pa.float64()),
        ("est_ttft_change_ms", pa.float64()),
        ("baseline_observed_ttft_ms", pa.float64()),
        ("current_observed_ttft_ms", pa.float64()),
        ("baseline_sim_ttft_s", pa.float64()),
        ("current_sim_ttft_s", pa.float64()),
        ("sim_ttft_change_s", pa.float64()),
        ("baseline_sim_queue_s", pa.float64()),
        ("current_sim_queue_s", pa.float64()),
        ("sim_queue_change_s", pa.float64()),
    ]
)
_CAUSE_SCHEMA = pa.schema(
    [
        ("prompt_family", pa.string()),
        ("model_revision", pa.string()),
        ("figure", pa.string()),
        ("baseline_tokens", pa.int64()),
        ("baseline_share", pa.float64()),
        ("current_tokens", pa.int64()),
        ("current_share", pa.float64()),
        ("change_points", pa.float64()),
        ("contribution_points", pa.float64()),
        ("rate_effect_points", pa.float64()),
        ("mix_effect_points", pa.float64()),
    ]
)
