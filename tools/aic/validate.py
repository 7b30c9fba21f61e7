#!/usr/bin/env python3
"""AIConfigurator's figures for the step-time validation (issue 44 item 4, docs/latency.md):
for each (model, GPU, TP) below, the prefill ms of a 1,024 / 8,192 / 32,768-token chunk alone
and the decode ms at batch 1 / 32 / 128 with 8,192 tokens of context each, straight from AIC's
compiled engine (no table, no interpolation), into tests/fixtures/aic/validation.json.

Run with a Python that has AIConfigurator (see tools/aic/tabulate.py)::

    /tmp/aicvenv/bin/python tools/aic/validate.py [--out PATH] [--configs /tmp/aic_configs]

`--configs DIR` also copies each model's config.json (and hf_quant_config.json, where AIC
ships one) from aiconfigurator_core/model_configs/ to DIR/<org>--<name>/.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from analyzer.config import aic_tables  # noqa: E402

PREFILL_TOKENS = (1024, 8192, 32768)
DECODE_BATCH = (1, 32, 128)
DECODE_CONTEXT = 8192
# (Hugging Face id AIC ships, hpa GPU name, tensor parallel, what the setting stands for)
SETTINGS = (
    ("meta-llama/Meta-Llama-3.1-8B", "H100", 1, "dense"),
    ("meta-llama/Meta-Llama-3.1-8B", "B200", 1, "dense"),
    ("meta-llama/Meta-Llama-3.1-70B", "H100", 4, "dense"),
    ("meta-llama/Meta-Llama-3.1-70B", "H100", 8, "dense"),
    ("meta-llama/Meta-Llama-3.1-70B", "H200", 4, "dense"),
    ("Qwen/Qwen3-32B", "H200", 1, "dense"),
    ("Qwen/Qwen3-30B-A3B", "H100", 1, "MoE"),
    ("Qwen/Qwen3-235B-A22B", "H200", 8, "MoE"),
    ("Qwen/Qwen3.5-35B-A3B", "H200", 1, "hybrid GDN + full attention, MoE"),
    ("Qwen/Qwen3.5-35B-A3B", "H100", 1, "hybrid GDN + full attention, MoE"),
    ("Qwen/Qwen3.5-27B", "B200", 1, "hybrid GDN + full attention, dense"),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "H100", 1, "hybrid Mamba-2 + attention, MoE"),
    ("openai/gpt-oss-20b", "H100", 1, "sliding window + full attention, MoE (MXFP4)"),
    ("openai/gpt-oss-120b", "H200", 1, "sliding window + full attention, MoE (MXFP4)"),
    ("google/gemma-4-26B-A4B", "B200", 1, "sliding window + full attention, MoE"),
    ("deepseek-ai/DeepSeek-V3", "H200", 8, "MLA, MoE (FP8)"),
)


def _quant(model: str, tp: int) -> dict[str, str]:
    """The quantization AIC assumes for the model (read from its config)."""
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import get_model

    config = build_model_config(
        tp_size=tp, pp_size=1, attention_dp_size=1, moe_tp_size=tp, moe_ep_size=1
    )
    built = get_model(model, config, aic_tables.AIC_BACKEND).config
    names = ("gemm", "moe", "kvcache", "fmha", "comm")
    return {n: getattr(built, f"{n}_quant_mode").name for n in names}


def measure(model: str, gpu: str, tp: int, kind: str) -> dict:
    """One setting's row: AIC's figures, where its config lives, and how long AIC took."""
    system = aic_tables.aic_system(gpu)
    version = aic_tables.backend_version(system)
    start = time.perf_counter()
    engine = aic_tables.compile_engine(model, system, tp, version)
    compiled = time.perf_counter()
    prefill = {str(n): engine.predict_prefill_latency(1, n, 0) for n in PREFILL_TOKENS}
    queried = time.perf_counter()
    decode = {str(b): engine.decode_step_latency(b, DECODE_CONTEXT - 1, 1) for b in DECODE_BATCH}
    done = time.perf_counter()
    return {
        "model": model,
        "kind": kind,
        "gpu": gpu,
        "system": system,
        "tensor_parallel": tp,
        "source": f"aiconfigurator {aic_tables.aic_version()} {system} vllm {version}",
        "quantization": _quant(model, tp),
        "config": f"aiconfigurator_core/model_configs/{model.replace('/', '--')}_config.json",
        "prefill_ms": {k: round(v, 3) for k, v in prefill.items()},
        "decode_ms": {k: round(v, 3) for k, v in decode.items()},
        "seconds": {
            "compile": round(compiled - start, 3),
            "first_three_prefill_queries": round(queried - compiled, 4),
            "decode_query_mean": round((done - queried) / len(DECODE_BATCH), 6),
        },
    }


def copy_config(model: str, into: Path) -> None:
    import aiconfigurator_core

    shipped = Path(aiconfigurator_core.__file__).parent / "model_configs"
    stem = model.replace("/", "--")
    folder = into / stem
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shipped / f"{stem}_config.json", folder / "config.json")
    quant = shipped / f"{stem}_hf_quant_config.json"
    if quant.exists():
        shutil.copyfile(quant, folder / "hf_quant_config.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests/fixtures/aic/validation.json")
    parser.add_argument("--configs", type=Path, help="copy each model's config.json here")
    args = parser.parse_args(argv)
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    rows = []
    for model, gpu, tp, kind in SETTINGS:
        rows.append(measure(model, gpu, tp, kind))
        if args.configs:
            copy_config(model, args.configs)
        row = rows[-1]
        print(f"{model} {gpu} TP{tp}: prefill {row['prefill_ms']} decode {row['decode_ms']}")
    doc = {
        "what": (
            "AIConfigurator's step times straight from its compiled engine: prefill_ms of one "
            "chunk of N new tokens, no prefix (predict_prefill_latency(1, N, 0)), keyed by N; "
            f"decode_ms of a decode-only step of B requests with {DECODE_CONTEXT} tokens of "
            f"context each (decode_step_latency(B, {DECODE_CONTEXT - 1}, 1)), keyed by B"
        ),
        "made_by": "tools/aic/validate.py",
        "settings": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
