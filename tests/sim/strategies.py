"""Hypothesis strategies: small traces with plenty of accidental and deliberate sharing."""

from __future__ import annotations

from hypothesis import strategies as st

from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest


@st.composite
def traces(draw, max_requests: int = 10, max_len: int = 40) -> list[SimRequest]:
    """Requests that resend, extend or branch off earlier prompts (+ their outputs)."""
    out: list[SimRequest] = []
    seqs: list[list[int]] = []
    tokens = st.integers(0, 4)
    for i in range(draw(st.integers(1, max_requests))):
        how = draw(st.sampled_from(["fresh", "branch", "resend"])) if seqs else "fresh"
        if how == "fresh":
            prompt = draw(st.lists(tokens, min_size=1, max_size=max_len))
        else:
            base = draw(st.sampled_from(seqs))
            cut = draw(st.integers(0, len(base)))
            tail_max = 0 if how == "resend" else max_len // 2
            prompt = base[:cut] + draw(st.lists(tokens, max_size=tail_max))
            prompt = prompt or [0]
        kind = draw(st.sampled_from(["none", "ids", "count"]))
        ids = draw(st.lists(tokens, max_size=max_len)) if kind == "ids" else None
        count = draw(st.integers(0, max_len)) if kind == "count" else 0
        namespace = draw(st.sampled_from([None, None, "salt"]))
        out.append(SimRequest(f"q{i}", prompt, ids, count, namespace))
        seqs.append(prompt + (ids or []))
    return out


@st.composite
def policies(draw, bounded: bool | None = None, spec: bool = True):
    """Any valid vLLM policy over small blocks (plus group counts)."""
    block = draw(st.sampled_from([2, 4, 8]))
    groups = draw(
        st.sampled_from(
            [
                ("full_attention",),
                ("full_attention", "mamba"),
                ("full_attention", "sliding_window"),
                ("full_attention", "sliding_window", "mamba"),
            ]
        )
    )
    values = {"block_size": block, "groups": list(groups)}
    sparse = len(groups) > 1
    values["retention_interval"] = draw(
        st.sampled_from([0, None, 2 * block] if sparse else [0, None])
    )
    if sparse and draw(st.booleans()):
        values["prefix_match_unit"] = draw(st.sampled_from([u for u in (1, 2) if u < block]))
    if "sliding_window" in groups:
        values["sliding_window"] = draw(st.integers(2, 3 * block))
    if draw(st.booleans()):
        values["max_num_batched_tokens"] = draw(st.integers(block, 4 * block))
    if bounded is None:
        bounded = draw(st.booleans())
    if bounded:
        values["num_blocks"] = draw(st.integers(4, 40))
    if spec:
        values["spec_decode"] = draw(st.sampled_from(["none", "eagle_lookahead", "eagle_drop"]))
    counts = {g: draw(st.integers(1, 2)) for g in groups} if bounded else None
    return make_policy(values), counts
