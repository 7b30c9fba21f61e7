#!/usr/bin/env python3
"""Tabulate AIConfigurator's step times for one (model, GPU, tensor parallelism) as the JSON
table hpa's `aic` step model reads (`analyzer.config.aic_tables`).

Run with a Python that has AIConfigurator (the `aic` extra, or a scratch venv: `python -m venv
/tmp/aicvenv && /tmp/aicvenv/bin/pip install aiconfigurator-core==0.12.0`); hpa itself need not
be installed there, this script imports `analyzer.config.aic_tables` from the checkout::

    /tmp/aicvenv/bin/python tools/aic/tabulate.py --model Qwen/Qwen3.5-35B-A3B --gpu H200 \\
        --tensor-parallel 1 --out tests/fixtures/aic/qwen3.5-35b-a3b_h200_tp1.json
    /tmp/aicvenv/bin/python tools/aic/tabulate.py ... --cache   # into hpa's cache instead

`--model`: a Hugging Face id AIConfigurator ships (aiconfigurator_core/model_configs/) or a
path to a config.json; `--gpu`: H100, H200, B200, ... (or an AIC system name, h200_sxm).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from analyzer.config import aic_tables  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--tensor-parallel", type=int, default=1)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="write the table here")
    where.add_argument("--cache", action="store_true", help="write it into hpa's table cache")
    args = parser.parse_args(argv)
    by_system = {system: name.upper() for name, system in aic_tables.AIC_SYSTEMS.items()}
    gpu = by_system.get(args.gpu, args.gpu.upper())
    system = aic_tables.aic_system(gpu)
    start = time.perf_counter()
    table = aic_tables.tabulate(args.model, system, args.tensor_parallel, gpu_name=gpu)
    seconds = time.perf_counter() - start
    out = args.out or aic_tables.cache_path(args.model, gpu, args.tensor_parallel)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(table, indent=1) + "\n")
    step = aic_tables.TableStep(table)
    print(f"{out}: {table['source']} ({seconds:.1f} s); {step.describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
