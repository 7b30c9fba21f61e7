"""The TTFT cost model fit (analyzer.metrics.ttft) and its use by `hpa compare`."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from analyzer.metrics.ttft import fit_by_revision, fit_ttft
from analyzer.pipeline.compare import compare
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from tests.conftest import write_jsonl
from tests.metrics.conftest import build_groups_db, groups_records


def test_exact_line_is_recovered():
    x = np.array([0, 100, 250, 1000])
    fit = fit_ttft(x, 20 + 0.1 * x)
    assert fit.a_ms == pytest.approx(20)
    assert fit.b_ms_per_token == pytest.approx(0.1)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.n == 4
    assert fit.predict([10]) == pytest.approx([21.0])


def test_noisy_fit_matches_numpy_polyfit_and_r2():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4000, 500)
    y = 30 + 0.09 * x + rng.normal(0, 20, 500)
    fit = fit_ttft(x, y)
    b, a = np.polyfit(x, y, 1)
    assert (fit.a_ms, fit.b_ms_per_token) == pytest.approx((a, b))
    r2 = np.corrcoef(x, y)[0, 1] ** 2  # simple regression: R^2 = r^2
    assert fit.r2 == pytest.approx(r2)
    assert fit.n == 500


def test_nan_ttfts_are_skipped():
    fit = fit_ttft([0, 10, 20, 30], [1.0, 2.0, float("nan"), 4.0])
    assert fit.n == 3 and fit.b_ms_per_token == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("x", "y"), [([], []), ([5], [1.0]), ([7, 7, 7], [1.0, 2.0, 3.0])], ids=str
)
def test_no_fit_without_two_distinct_points(x, y):
    assert fit_ttft(x, y) is None


def test_constant_ttft_fits_exactly():
    fit = fit_ttft([1, 2, 3], [5.0, 5.0, 5.0])
    assert (fit.a_ms, fit.b_ms_per_token, fit.r2) == pytest.approx((5.0, 0.0, 1.0))


def test_shape_mismatch_is_a_bug():
    with pytest.raises(ValueError):
        fit_ttft([1, 2], [1.0])


def test_fit_by_revision():
    fits = fit_by_revision(["a", "b", "a", "b", "c"], [0, 0, 10, 10, 3], [1, 2, 2, 4, 9])
    assert list(fits) == ["a", "b", "c"]
    assert fits["a"].b_ms_per_token == pytest.approx(0.1)
    assert fits["b"].a_ms == pytest.approx(2) and fits["b"].b_ms_per_token == pytest.approx(0.2)
    assert fits["c"] is None


def test_compare_fits_ttft_per_revision_and_estimates_the_change(tmp_path):
    # Run 2's fresh prefill per group is 2200, 2200, 616, 616: TTFT exactly linear in it,
    # 20 + 0.1 x fresh on rev-a and 50 + 0.2 x fresh on rev-b.
    fresh = [2200, 2200, 616, 616] * 8
    ttft = [(20 + 0.1 * f) if i < 16 else (50 + 0.2 * f) for i, f in enumerate(fresh)]
    db = build_groups_db(tmp_path / "t.duckdb", groups_records(ttft_ms=ttft))
    result = compare(db_path=db, runs=(2, 1))
    assert result.ttft_source == "trace ttft_ms" and result.fit_run == 2
    a, b = result.fits["rev-a"], result.fits["rev-b"]
    assert (a.a_ms, a.b_ms_per_token, a.r2, a.n) == pytest.approx((20, 0.1, 1.0, 16))
    assert (b.a_ms, b.b_ms_per_token, b.r2, b.n) == pytest.approx((50, 0.2, 1.0, 16))
    total = result.groups.to_pylist()[-1]
    # mean fresh prefill per request: run 2 (baseline) 1408, run 1 (current) 1012
    assert total["baseline_est_ttft_ms"] == pytest.approx((160.8 + 331.6) / 2)
    assert total["current_est_ttft_ms"] == pytest.approx((121.2 + 252.4) / 2)
    assert total["est_ttft_change_ms"] == pytest.approx(-59.4)
    assert total["baseline_observed_ttft_ms"] == pytest.approx(np.mean(ttft))
    assert result.sentence.endswith("estimated TTFT -59.4 ms per request.")
    assert "R^2 1.000, n 16" in result.fit_lines()[0]


def test_ttft_observed_on_another_model_estimates_nothing(tmp_path):
    """(issue 47 item 4: WEKA's TTFT, Claude's on Anthropic's API, fitted against a
    qwen3-next replay's fresh prefill gave "+279.5 ms") a revision that does not name the
    replay's model keeps its fit line, says why it is not used, and has no TTFT change."""
    fresh = [2200, 2200, 616, 616] * 8
    ttft = [(20 + 0.1 * f) if i < 16 else (50 + 0.2 * f) for i, f in enumerate(fresh)]
    records = groups_records(ttft_ms=ttft)
    for i, r in enumerate(records):
        r["model_revision"] = "qwen3-next-80b-a3b@2026-10" if i < 16 else "claude-sonnet-4-5"
    db = tmp_path / "o.duckdb"
    ingest([write_jsonl(tmp_path / "o.jsonl", records)], db_path=db)
    model = "qwen3-next-80b-a3b"
    keep = {"block_size": 1056, "retention_interval": None, "max_num_batched_tokens": 2048}
    run_replay(make_policy({"model": model, **keep}), db_path=db)
    run_replay(make_policy({"model": model, "block_size": 1056}), db_path=db)
    result = compare(db_path=db, runs=(2, 1))
    assert result.other_models == ("claude-sonnet-4-5",)
    claude, qwen = result.fit_lines()
    assert claude.endswith(
        "; not used for TTFT estimates: observed on claude-sonnet-4-5, another model than "
        "the replay's qwen3-next-80b-a3b"
    )
    assert "not used" not in qwen
    rows = {g["model_revision"]: g for g in result.groups.to_pylist()}
    assert rows["claude-sonnet-4-5"]["est_ttft_change_ms"] is None
    assert rows["qwen3-next-80b-a3b@2026-10"]["est_ttft_change_ms"] is not None
    assert result.sentence.endswith(
        "; unavailable for claude-sonnet-4-5 (the trace's TTFT of claude-sonnet-4-5 was "
        "observed on another model than the replay's qwen3-next-80b-a3b; a concurrent replay "
        "simulates it)."
    )
    assert orjson.loads(result.to_json())["ttft_model"]["other_model_revisions"] == [
        "claude-sonnet-4-5"
    ]
