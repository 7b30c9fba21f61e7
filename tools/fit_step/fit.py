#!/usr/bin/env python3
"""Fit the roofline's efficiencies (`analyzer.config.step_time.Efficiency`) to NVIDIA
AIConfigurator's measured step times, and check them on issue 44's validation figures.

    .venv/bin/python tools/fit_step/fit.py [--loso] [--out tools/fit_step/fit_result.json]

Data (made by tools/fit_step/collect.py from aiconfigurator-core 0.12.0, vLLM backend):
aic_points.json, AIC's step times for 58 (model, GPU, TP) settings on a grid (prefill of 16
to 32,768 new tokens after 0 to 32,768 cached ones; decode of 1 to 256 requests at 1,024 to
32,768 tokens of context each); aic_parts.json, the same steps' per-op times summed by the
roofline's parts (dense GEMMs, routed experts, attention, recurrent state, ...).

Objective: least squares on log(roofline / AIC) of every step time, plus, at weight
`PART_WEIGHT`, the log error of each part against AIC's time for that part wherever AIC's
part is at least 5 % of the step (so that a part is priced by its own constants: without
them the GDN scan's time is absorbed by the MoE's, which share the same tokens). Held out:
the 6 figures of each validation setting (tests/fixtures/aic/validation.json: prefill of
1,024 / 8,192 / 32,768 new tokens alone, decode of 1 / 32 / 128 requests at 8,192), and
`LEFT_OUT`: where AIC's figure is not physical, and MLA. FP8 checkpoints are priced with an
FP8 KV cache, as AIC prices them. Search: Levenberg-Marquardt over
the parameters' logarithms (numpy, a numeric Jacobian); fractions of peak are capped at 1.

`--loso`: refit once per validation setting with every point of that setting left out, and
report its 6 figures from that fit (leave-one-setting-out).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from analyzer.config.hardware import GPUS  # noqa: E402
from analyzer.config.models import model_figures  # noqa: E402
from analyzer.config.step_time import (  # noqa: E402
    DECODE_CONTEXT,
    DECODE_FIGURES,
    FRACTIONS,
    PREFILL_FIGURES,
    Efficiency,
    RooflineStep,
)

HERE = ROOT / "tools/fit_step"
VALIDATION = ROOT / "tests/fixtures/aic/validation.json"
GPU_ORDER = ("H100", "H200", "B200", "A100", "L40S")
# Each GPU its own: the fractions of its peaks, and the MoE kernels' fixed time a layer.
PER_GPU = (
    "mfu_prefill",
    "bandwidth",
    "mfu_attention",
    "kv_bandwidth",
    "mfu_moe",
    "moe_bandwidth",
    "mfu_moe_w4",
    "interconnect",
    "moe_layer_us",
)
# One for all GPUs: the shapes of the GEMM efficiencies, the FP8 and 4-bit kernels, the
# recurrent scan and the fixed times.
SHARED = (
    "gemm_half_tokens",
    "moe_half_width",
    "mfu_state",
    "fp8",
    "fp8_moe",
    "fp8_bandwidth",
    "w4_bandwidth",
    "layer_us",
    "attention_layer_us",
    "prefill_attention_us",
    "request_us",
    "allreduce_us",
)
FIXED = {"step_us": 0.0}  # AIC sums kernels: a step has no time of its own there
# Where the search starts (rough readings of AIC's per-op times), whatever the defaults are.
START = {
    "mfu_prefill": 0.75, "gemm_half_tokens": 64.0, "bandwidth": 0.8, "mfu_attention": 0.6,
    "kv_bandwidth": 0.9, "mfu_moe": 0.55, "moe_half_width": 150.0, "moe_bandwidth": 0.85,
    "mfu_state": 0.5, "mfu_moe_w4": 0.5, "w4_bandwidth": 0.6, "fp8": 0.6, "fp8_moe": 0.6,
    "fp8_bandwidth": 0.6, "interconnect": 0.7, "layer_us": 10.0, "attention_layer_us": 10.0,
    "prefill_attention_us": 10.0, "moe_layer_us": 25.0, "request_us": 1.0,
    "allreduce_us": 5.0,
}  # fmt: skip
PART_WEIGHT = 0.3
PART_SHARE = 0.05  # a part is fitted where AIC's is at least this share of the step
# Points the fit leaves out (docs/latency.md says more):
# - B200 with FP8 weights: not physical: AIC's fp8_block GEMMs on b200_sxm take longer for
#   1 decode than for 8 (Qwen3-30B-A3B-FP8 28.2 vs 20.9 ms; DeepSeek-V3 TP8 37.5 vs 26.8);
# - Mamba-2 decode (NemotronH): not physical: AIC's mamba_ssm op prices the decode state
#   update at about nothing (Nemotron-H-56B, 256 requests at 1,024: 0.21 ms for 467 GB of
#   fp32 state read and written, 97 ms at the H200's 4.8 TB/s);
# - MLA (DeepSeek-V3): outside the roofline's form: AIC prices its MLA block at 114 us a
#   layer and its FP8 MoE at 126 us a layer for one decode at TP 8 (GQA attention: 12-20);
#   fitted to, it would move the FP8 constants of every other model.
LEFT_OUT = {
    "B200 FP8": lambda s, step: s.gpu == "B200" and s.fp8,
    "Mamba-2 decode": lambda s, step: (
        s.figures.architecture == "NemotronHForCausalLM" and not step[0]
    ),
    "MLA": lambda s, step: s.figures.architecture == "DeepseekV3ForCausalLM",
}
VERBOSE = False


@dataclass
class Setting:
    name: str
    gpu: str
    tp: int
    figures: object
    steps: list  # (prefill chunks, decodes, context sum), as RooflineStep.step_s takes
    ms: np.ndarray  # AIC's ms per step
    parts: list  # AIC's ms per step by part (aic_parts.json)
    held_out: np.ndarray  # bool per step: one of the 6 validation figures
    fp8: bool

    @property
    def label(self) -> str:
        return f"{self.name} {self.gpu} TP{self.tp}"

    def left_out(self) -> np.ndarray:
        """Bool per step: the fit leaves it out (`LEFT_OUT`)."""
        rules = LEFT_OUT.values()
        return np.array([any(rule(self, st) for rule in rules) for st in self.steps])

    def fitted_parts(self, step: tuple) -> tuple[str, ...]:
        """The parts whose AIC time maps onto the roofline's: none for MLA (AIC's mla_block
        holds the projections too); in a decode with shared experts, not the dense GEMMs
        and the experts (AIC overlaps the shared expert with the routed ones)."""
        f = self.figures
        if f.architecture == "DeepseekV3ForCausalLM":
            return ()
        if not step[0] and f.num_shared_experts:
            return ("attention", "state", "comm")
        return ("dense", "moe", "attention", "state", "comm")


def fp8_kv(figures):
    """The figures with an FP8 KV cache, as AIC prices every FP8 checkpoint (its kvcache
    quantization is fp8 for them; vLLM's --kv-cache-dtype fp8)."""
    kv = figures.kv_bytes_per_token_per_layer // figures.kv_bytes_per_element
    return replace(figures, kv_bytes_per_token_per_layer=kv, kv_bytes_per_element=1)


def _grid(section: dict, first: str, second: str) -> list[tuple[int, int, int, int]]:
    return [
        (i, j, a, b)
        for i, a in enumerate(section[first])
        for j, b in enumerate(section[second])
    ]  # fmt: skip


def load_settings() -> list[Setting]:
    """Every setting of aic_points.json: its steps, AIC's ms, its parts, what is held out."""
    rows = json.loads(VALIDATION.read_text())["settings"]
    validation = {(r["model"], r["gpu"], r["tensor_parallel"]) for r in rows}
    by_part = json.loads((HERE / "aic_parts.json").read_text())
    out = []
    for row in json.loads((HERE / "aic_points.json").read_text())["settings"]:
        figures = model_figures(str(ROOT / row["config"]))
        key = (row["model"], row["gpu"], row["tensor_parallel"])
        parts = by_part[f"{row['name']} {row['gpu']} TP{row['tensor_parallel']}"]
        steps, ms, split, held = [], [], [], []
        pre, dec = row["prefill"], row["decode"]
        for i, j, n, p in _grid(pre, "new_tokens", "prefix_tokens"):
            steps.append(([(n, p)], 0, 0))
            ms.append(pre["ms"][i][j])
            split.append({k: v[i][j] for k, v in parts["prefill"].items()})
            held.append(key in validation and p == 0 and n in PREFILL_FIGURES)
        for i, j, b, c in _grid(dec, "batch", "context_tokens"):
            steps.append(([], b, b * c))
            ms.append(dec["ms"][i][j])
            split.append({k: v[i][j] for k, v in parts["decode"].items()})
            held.append(key in validation and c == DECODE_CONTEXT and b in DECODE_FIGURES)
        fp8 = RooflineStep(figures, GPUS[row["gpu"].lower()]).compute_dtype == "FP8"
        if fp8:
            figures = fp8_kv(figures)
        out.append(
            Setting(
                row["name"], row["gpu"], row["tensor_parallel"], figures, steps,
                np.array(ms), split, np.array(held), fp8,
            )
        )  # fmt: skip
    return out


class Params:
    """The fitted parameters as one vector of logarithms: SHARED, then PER_GPU per GPU."""

    def __init__(self, gpus: tuple[str, ...]) -> None:
        self.gpus = gpus
        self.names = list(SHARED) + [f"{g}.{k}" for g in gpus for k in PER_GPU]

    def start(self) -> np.ndarray:
        values = [START[k] for k in SHARED] + [START[k] for _ in self.gpus for k in PER_GPU]
        return np.log(np.maximum(values, 1e-3))

    def efficiency(self, x: np.ndarray, gpu: str) -> Efficiency:
        values = dict(FIXED)
        for k, v in zip(SHARED, x[: len(SHARED)], strict=True):
            values[k] = math.exp(v)
        at = len(SHARED) + self.gpus.index(gpu) * len(PER_GPU)
        for k, v in zip(PER_GPU, x[at : at + len(PER_GPU)], strict=True):
            values[k] = math.exp(v)
        for k in FRACTIONS:
            values[k] = min(values[k], 1.0)
        return Efficiency(**values)

    def touches(self, j: int, gpu: str) -> bool:
        """Whether parameter j moves the settings on `gpu`."""
        if j < len(SHARED):
            return True
        return self.gpus[(j - len(SHARED)) // len(PER_GPU)] == gpu


def roofline(s: Setting, efficiency: Efficiency) -> RooflineStep:
    return RooflineStep(s.figures, GPUS[s.gpu.lower()], s.tp, efficiency)


def predicted_ms(s: Setting, efficiency: Efficiency) -> np.ndarray:
    model = roofline(s, efficiency)
    return np.array([model.step_s(*step) * 1e3 for step in s.steps])


def setting_residuals(params: Params, x: np.ndarray, s: Setting, mask: np.ndarray) -> np.ndarray:
    """The log errors of the setting's kept steps, then PART_WEIGHT x those of their parts."""
    model = roofline(s, params.efficiency(x, s.gpu))
    totals, parts = [], []
    for i in np.flatnonzero(mask):
        step = s.steps[i]
        totals.append(math.log(model.step_s(*step) * 1e3 / s.ms[i]))
        names = s.fitted_parts(step)
        if not names:
            continue
        ours = model.parts(*step)
        for name in names:
            aic = s.parts[i].get(name, 0.0)
            if aic >= PART_SHARE * s.ms[i] and aic > 0.02 and ours[name] > 0:
                parts.append(PART_WEIGHT * math.log(ours[name] * 1e3 / aic))
    return np.array(totals + parts)


def fit(
    params: Params, settings: list[Setting], masks, x0: np.ndarray, iterations: int = 80
) -> np.ndarray:
    """Levenberg-Marquardt on the stacked residuals; a numeric Jacobian, each parameter
    moving only the settings it touches."""

    def residuals(x: np.ndarray) -> list[np.ndarray]:
        return [setting_residuals(params, x, s, m) for s, m in zip(settings, masks, strict=True)]

    x, lam = x0.copy(), 1e-2
    per = residuals(x)
    r = np.concatenate(per)
    cost = float(r @ r)
    for _ in range(iterations):
        jac = np.zeros((r.size, x.size))
        for j in range(x.size):
            step = np.zeros_like(x)
            step[j] = 1e-4
            col = []
            for s, mask, base in zip(settings, masks, per, strict=True):
                if params.touches(j, s.gpu):
                    col.append((setting_residuals(params, x + step, s, mask) - base) / 1e-4)
                else:
                    col.append(np.zeros(base.size))
            jac[:, j] = np.concatenate(col)
        grad, normal = jac.T @ r, jac.T @ jac
        delta = np.zeros_like(x)
        while lam < 1e8:
            delta = np.linalg.solve(normal + lam * np.diag(np.diag(normal) + 1e-9), -grad)
            trial = residuals(x + delta)
            rt = np.concatenate(trial)
            if float(rt @ rt) < cost:
                x, per, r, cost, lam = x + delta, trial, rt, float(rt @ rt), lam / 3
                break
            lam *= 4
        if VERBOSE:
            print(f"cost {cost:.4f} lambda {lam:.1e}", file=sys.stderr)
        if lam >= 1e8 or np.max(np.abs(delta)) < 1e-5:
            break
    return x


def figures_table(params: Params, x: np.ndarray, settings: list[Setting]) -> list[dict]:
    """The 6 validation figures of each validation setting: AIC, roofline, error."""
    rows = []
    for s in settings:
        if not s.held_out.any():
            continue
        ms = predicted_ms(s, params.efficiency(x, s.gpu))
        errors = ms[s.held_out] / s.ms[s.held_out] - 1
        rows.append(
            {
                "setting": s.label,
                "aic_ms": [round(float(v), 3) for v in s.ms[s.held_out]],
                "roofline_ms": [round(float(v), 3) for v in ms[s.held_out]],
                "error_pct": [round(100 * float(v), 1) for v in errors],
                "max_abs_error_pct": round(100 * float(np.max(np.abs(errors))), 1),
            }
        )
    return rows


def fit_errors(params: Params, x: np.ndarray, settings: list[Setting], masks) -> dict:
    """The step times' errors over the fitted points (parts left out), per setting and all."""
    per, every = {}, []
    for s, mask in zip(settings, masks, strict=True):
        errors = np.log(predicted_ms(s, params.efficiency(x, s.gpu))[mask] / s.ms[mask])
        every.append(errors)
        if errors.size:
            per[s.label] = {
                "points": int(errors.size),
                "rms_log_error": round(float(np.sqrt(np.mean(errors**2))), 4),
                "max_abs_error_pct": round(100 * float(np.max(np.abs(np.expm1(errors)))), 1),
            }
    errors = np.concatenate(every)
    return {
        "points": int(errors.size),
        "rms_log_error": round(float(np.sqrt(np.mean(errors**2))), 4),
        "median_abs_error_pct": round(100 * float(np.median(np.abs(np.expm1(errors)))), 1),
        "share_within_25_pct": round(float(np.mean(np.abs(np.expm1(errors)) <= 0.25)), 3),
        "per_setting": per,
    }


def efficiencies(params: Params, x: np.ndarray) -> dict[str, dict[str, float]]:
    """Each GPU's fitted Efficiency, to 3 significant digits."""
    out = {}
    for g in params.gpus:
        e = params.efficiency(x, g)
        values = {f.name: getattr(e, f.name) for f in fields(e)}
        out[g] = {k: float(f"{v:.3g}") if v > 1e-6 else 0.0 for k, v in values.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loso", action="store_true", help="leave-one-setting-out refits")
    parser.add_argument("--out", type=Path, help="write the fit and its errors here (JSON)")
    parser.add_argument("--iterations", type=int, default=80)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    global VERBOSE
    VERBOSE = args.verbose
    start = time.perf_counter()
    settings = load_settings()
    gpus = tuple(g for g in GPU_ORDER if any(s.gpu == g for s in settings))
    params = Params(gpus)
    masks = [~s.held_out & ~s.left_out() for s in settings]
    x = fit(params, settings, masks, params.start(), args.iterations)
    result = {
        "made_by": "tools/fit_step/fit.py",
        "data": "tools/fit_step/aic_points.json, tools/fit_step/aic_parts.json",
        "part_weight": PART_WEIGHT,
        "left_out": list(LEFT_OUT),
        "efficiency": efficiencies(params, x),
        "fit": fit_errors(params, x, settings, masks),
        "validation": figures_table(params, x, settings),
    }
    print(json.dumps(result["efficiency"], indent=1))
    print({k: v for k, v in result["fit"].items() if k != "per_setting"})
    for row in result["validation"]:
        print(f"{row['setting']:32s} {row['error_pct']} max {row['max_abs_error_pct']}")
    if args.loso:
        result["leave_one_setting_out"] = []
        for i, s in enumerate(settings):
            if not s.held_out.any():
                continue
            left = [m if k != i else np.zeros_like(m) for k, m in enumerate(masks)]
            row = figures_table(params, fit(params, settings, left, x, args.iterations), [s])[0]
            result["leave_one_setting_out"].append(row)
            print(f"LOSO {row['setting']:27s} {row['error_pct']} max {row['max_abs_error_pct']}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
