"""TTFT cost model: ttft_ms = a + b * fresh_prefill_tokens, fitted by least squares.

Pure NumPy, no I/O. `fit_ttft` fits one line; `fit_by_revision` fits one per model
revision (different models prefill at different speeds). A fit needs at least two
requests with different fresh-prefill counts; otherwise there is none (None).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TtftFit:
    """ttft_ms ~= a_ms + b_ms_per_token * fresh_prefill_tokens over n requests."""

    a_ms: float
    b_ms_per_token: float
    r2: float
    n: int

    def predict(self, fresh_prefill_tokens) -> np.ndarray:
        return self.a_ms + self.b_ms_per_token * np.asarray(fresh_prefill_tokens, dtype=np.float64)

    def as_dict(self) -> dict:
        return {
            "a_ms": self.a_ms,
            "b_ms_per_token": self.b_ms_per_token,
            "r2": self.r2,
            "n": self.n,
        }


def fit_ttft(fresh_prefill_tokens, ttft_ms) -> TtftFit | None:
    """Ordinary least squares of ttft_ms on fresh_prefill_tokens, skipping NaN TTFTs.

    R^2 = 1 - SS_res / SS_tot (1.0 when the TTFTs are all equal and fitted exactly).
    Returns None with fewer than two usable requests or a constant fresh-prefill count.
    """
    x = np.asarray(fresh_prefill_tokens, dtype=np.float64)
    y = np.asarray(ttft_ms, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"fit_ttft: {x.shape} tokens vs {y.shape} TTFTs")
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = int(x.size)
    if n < 2:
        return None
    dx = x - x.mean()
    sxx = float(dx @ dx)
    if sxx == 0.0:
        return None
    dy = y - y.mean()
    b = float(dx @ dy) / sxx
    a = float(y.mean() - b * x.mean())
    resid = y - (a + b * x)
    ss_res = float(resid @ resid)
    ss_tot = float(dy @ dy)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    return TtftFit(a, b, r2, n)


def fit_by_revision(revisions, fresh_prefill_tokens, ttft_ms) -> dict[str, TtftFit | None]:
    """One fit per distinct model revision (None where that revision cannot be fitted)."""
    revs = np.asarray(revisions, dtype=object)
    x = np.asarray(fresh_prefill_tokens, dtype=np.float64)
    y = np.asarray(ttft_ms, dtype=np.float64)
    return {rev: fit_ttft(x[revs == rev], y[revs == rev]) for rev in sorted(set(revs.tolist()))}
