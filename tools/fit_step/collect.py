#!/usr/bin/env python3
"""AIConfigurator's step times on a grid, for fitting the roofline's efficiencies
(tools/fit_step/fit.py, docs/latency.md): for each (model, GPU, TP) in `SETTINGS`, AIC's
prefill and decode tables (`analyzer.config.aic_tables.tabulate`: its compiled engine, vLLM
backend, no interpolation) into tools/fit_step/aic_points.json.

Run with a Python that has AIConfigurator 0.12.0 (see tools/aic/tabulate.py)::

    /tmp/aicvenv/bin/python tools/fit_step/collect.py [--out PATH]

Each setting names hpa's config.json for the model (`config`, relative to the repository)
and the Hugging Face id AIC ships (`aic`); a setting AIC cannot price is listed under
`failed` with its first error line. The 6 figures of issue 44's validation settings
(tests/fixtures/aic/validation.json) are in these tables too; fit.py leaves them out.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1].parent
sys.path.insert(0, str(ROOT))

from analyzer.config import aic_tables  # noqa: E402

FIXTURES = "tests/fixtures/hf_configs"
OWN = "tools/fit_step/configs"
# (hpa's config.json, the id AIC ships, GPU, TP)
MODELS = {
    "llama-3.1-8b": (f"{FIXTURES}/llama-3.1-8b.json", "meta-llama/Meta-Llama-3.1-8B"),
    "llama-3.1-70b": (f"{FIXTURES}/llama-3.1-70b.json", "meta-llama/Meta-Llama-3.1-70B"),
    "qwen3-8b": (f"{FIXTURES}/qwen3-8b.json", "Qwen/Qwen3-8B"),
    "qwen3-32b": (f"{FIXTURES}/qwen3-32b.json", "Qwen/Qwen3-32B"),
    "qwen3-30b-a3b": (f"{FIXTURES}/qwen3-30b-a3b.json", "Qwen/Qwen3-30B-A3B"),
    "qwen3-235b-a22b": (f"{FIXTURES}/qwen3-235b-a22b.json", "Qwen/Qwen3-235B-A22B"),
    "qwen3.5-35b-a3b": (f"{FIXTURES}/qwen3.5-35b-a3b.json", "Qwen/Qwen3.5-35B-A3B"),
    "qwen3.5-27b": (f"{FIXTURES}/qwen3.5-27b.json", "Qwen/Qwen3.5-27B"),
    "nemotron-3-nano-30b-a3b": (
        f"{FIXTURES}/nemotron-3-nano-30b-a3b.json",
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    ),
    "nemotron-h-56b": (f"{FIXTURES}/nemotron-h-56b-base-8k.json", "nvidia/Nemotron-H-56B-Base-8K"),
    "gpt-oss-20b": (f"{FIXTURES}/gpt-oss-20b.json", "openai/gpt-oss-20b"),
    "gpt-oss-120b": (f"{FIXTURES}/gpt-oss-120b.json", "openai/gpt-oss-120b"),
    "deepseek-v3": (f"{FIXTURES}/deepseek-v3.json", "deepseek-ai/DeepSeek-V3"),
    "qwen3-32b-fp8": (f"{OWN}/qwen3-32b-fp8.json", "Qwen/Qwen3-32B-FP8"),
    "qwen3-30b-a3b-fp8": (f"{OWN}/qwen3-30b-a3b-fp8.json", "Qwen/Qwen3-30B-A3B-FP8"),
}
SETTINGS = (
    # issue 44's validation settings (tests/fixtures/aic/validation.json; gemma-4 left out:
    # hpa does not read Gemma4ForConditionalGeneration)
    ("llama-3.1-8b", "H100", 1),
    ("llama-3.1-8b", "B200", 1),
    ("llama-3.1-70b", "H100", 4),
    ("llama-3.1-70b", "H100", 8),
    ("llama-3.1-70b", "H200", 4),
    ("qwen3-32b", "H200", 1),
    ("qwen3-30b-a3b", "H100", 1),
    ("qwen3-235b-a22b", "H200", 8),
    ("qwen3.5-35b-a3b", "H200", 1),
    ("qwen3.5-35b-a3b", "H100", 1),
    ("qwen3.5-27b", "B200", 1),
    ("nemotron-3-nano-30b-a3b", "H100", 1),
    ("gpt-oss-20b", "H100", 1),
    ("gpt-oss-120b", "H200", 1),
    ("deepseek-v3", "H200", 8),
    # more settings, for the fit only
    ("llama-3.1-8b", "H200", 1),
    ("llama-3.1-8b", "H100", 2),
    ("qwen3-8b", "H100", 1),
    ("qwen3-8b", "H200", 1),
    ("qwen3-8b", "B200", 1),
    ("qwen3-32b", "H100", 1),
    ("qwen3-32b", "H100", 2),
    ("qwen3-32b", "B200", 1),
    ("llama-3.1-70b", "H200", 8),
    ("llama-3.1-70b", "B200", 2),
    ("llama-3.1-70b", "B200", 4),
    ("qwen3-30b-a3b", "H200", 1),
    ("qwen3-30b-a3b", "B200", 1),
    ("qwen3-30b-a3b", "H100", 2),
    ("qwen3-235b-a22b", "H100", 8),
    ("qwen3-235b-a22b", "B200", 4),
    ("qwen3.5-35b-a3b", "H200", 2),
    ("qwen3.5-35b-a3b", "B200", 1),
    ("qwen3.5-27b", "H100", 1),
    ("qwen3.5-27b", "H200", 1),
    ("qwen3.5-27b", "H200", 2),
    ("nemotron-3-nano-30b-a3b", "H200", 1),
    ("nemotron-3-nano-30b-a3b", "B200", 1),
    ("nemotron-h-56b", "H200", 1),
    ("nemotron-h-56b", "H100", 2),
    ("gpt-oss-20b", "H200", 1),
    ("gpt-oss-20b", "B200", 1),
    ("gpt-oss-120b", "H100", 1),
    ("gpt-oss-120b", "B200", 1),
    ("gpt-oss-120b", "H200", 2),
    ("deepseek-v3", "B200", 8),
    ("qwen3-32b-fp8", "H100", 1),
    ("qwen3-32b-fp8", "H200", 1),
    ("qwen3-30b-a3b-fp8", "H100", 1),
    ("qwen3-30b-a3b-fp8", "B200", 1),
    ("llama-3.1-8b", "A100", 1),
    ("qwen3-32b", "A100", 1),
    ("qwen3-30b-a3b", "A100", 1),
    ("llama-3.1-70b", "A100", 4),
    ("llama-3.1-8b", "L40S", 1),
    ("qwen3-8b", "L40S", 1),
    ("gpt-oss-20b", "L40S", 1),
    ("qwen3-30b-a3b-fp8", "L40S", 1),
)
NEW_TOKENS = (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
PREFIX_TOKENS = (0, 2048, 8192, 32768)
BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXT = (1024, 2048, 4096, 8192, 16384, 32768)


def category(op: str) -> str:
    """The roofline's part an AIC op belongs to (docs/latency.md): dense GEMMs, routed
    experts, attention, recurrent state, element-wise, communication."""
    name = op.split("_", 1)[1]  # less context_ / generation_
    if name.endswith("_ar") or name.startswith("ar_") or "allreduce" in name:
        return "comm"
    if "dispatch" in name or "p2p" in name:
        return "comm"
    if "moe" in name and "shared" not in name and "router" not in name:
        return "moe"
    if "attention" in name or "mla" in name:
        return "attention"
    if any(k in name for k in ("scan", "conv1d", "ssm", "recurrence")):
        return "state"
    return "dense" if "gemm" in name else "elementwise"


def parts(model: str, gpu: str, tp: int) -> dict:
    """AIC's per-op times summed by `category`, on the same grid as the tables."""
    system = aic_tables.aic_system(gpu)
    engine = aic_tables.compile_engine(model, system, tp, aic_tables.backend_version(system))

    def summed(ops) -> dict[str, float]:
        out: dict[str, float] = {}
        for op in ops:
            out[category(op[0])] = out.get(category(op[0]), 0.0) + op[1]
        return out

    prefill = [
        [summed(engine.run_static_per_op(batch_size=1, isl=n + p, osl=2, prefix=p)[0])
         for p in PREFIX_TOKENS]
        for n in NEW_TOKENS
    ]  # fmt: skip
    decode = [[summed(engine.decode_step_per_op(b, c - 1, 1)) for c in CONTEXT] for b in BATCH]
    cats = sorted({k for grid in (prefill, decode) for row in grid for cell in row for k in cell})
    return {
        part: {
            name: [[round(cell.get(name, 0.0), 4) for cell in row] for row in grid] for name in cats
        }
        for part, grid in (("prefill", prefill), ("decode", decode))
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tools/fit_step/aic_points.json")
    parser.add_argument("--only", help="collect only the settings of this model")
    parser.add_argument(
        "--parts", type=Path, help="also write AIC's per-op times by part here (diagnostics)"
    )
    args = parser.parse_args(argv)
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    rows, failed, by_part = [], [], {}
    for name, gpu, tp in SETTINGS:
        if args.only and name != args.only:
            continue
        config, aic = MODELS[name]
        start = time.perf_counter()
        try:
            table = aic_tables.tabulate(
                aic,
                aic_tables.aic_system(gpu),
                tp,
                gpu_name=gpu,
                new_tokens=NEW_TOKENS,
                prefix_tokens=PREFIX_TOKENS,
                batch=BATCH,
                context_tokens=CONTEXT,
            )
        except Exception as exc:  # noqa: BLE001 - a setting AIC cannot price is reported
            failed.append({"model": name, "gpu": gpu, "tensor_parallel": tp, "error": str(exc)})
            print(f"{name} {gpu} TP{tp}: FAILED {exc}", flush=True)
            continue
        rows.append({"name": name, "config": config, **table})
        if args.parts:
            by_part[f"{name} {gpu} TP{tp}"] = parts(aic, gpu, tp)
        print(f"{name} {gpu} TP{tp}: {time.perf_counter() - start:.1f} s", flush=True)
    doc = {
        "what": (
            "AIConfigurator's prefill and decode tables (ms) per (model, GPU, TP), from "
            "analyzer.config.aic_tables.tabulate; fitting data for the roofline's efficiencies"
        ),
        "made_by": "tools/fit_step/collect.py",
        "settings": rows,
        "failed": failed,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    if args.parts:
        args.parts.write_text(json.dumps(by_part) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
