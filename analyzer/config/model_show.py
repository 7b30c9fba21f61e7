"""What `hpa model show NAME|PATH` prints: a model preset or a Hugging Face config.json as hpa
reads it (`models.load_model`), as one dict (`model_show`) and as lines of a two-column table
(`show_lines`). The step-time model's figures join under "step" (`model_show`'s `step`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from analyzer.config.model_figures import ModelFigures
from analyzer.config.models import load_model, model_names
from analyzer.errors import ConfigError

GIB = 2**30
MIB = 2**20


def model_show(
    name: str, step: Callable[[ModelFigures], dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The model `name` (preset or file) as hpa derives it: the preset-layout keys and its
    `figures`. `step`, given the figures, adds the step model's dict under "step" (issue 44
    item 2: prefill and decode times for a GPU and tensor parallelism)."""
    model = load_model(name)
    kind = "preset" if name in model_names() and not Path(name).exists() else "file"
    shown = {"model": name, "kind": kind, **model}
    if step is not None and model.get("figures") is not None:
        shown["step"] = step(ModelFigures.from_dict(model["figures"]))
    return shown


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    if n < 2**10:
        return f"{n:,} B"
    unit, size = next((u, s) for u, s in (("GiB", GIB), ("MiB", MIB), ("KiB", 2**10)) if n >= s)
    return f"{n:,} B ({n / size:,.2f} {unit})"


def _billions(n: int) -> str:
    return f"{n / 1e9:,.2f} B"


def _cache_rows(m: dict[str, Any]) -> list[tuple[str, str]]:
    groups = ", ".join(f"{g} x{n}" for g, n in m.get("num_groups", {}).items())
    rows = [
        ("groups (KV-cache groups)", groups or ", ".join(m["groups"])),
        ("layers per group", str(m.get("layers_per_group", "-"))),
        ("block size", f"{m['block_size']:,} tokens"),
        ("bytes per block", _bytes(m.get("bytes_per_block"))),
        ("bytes per state", _bytes(m.get("bytes_per_state"))),
        ("KV bytes per token per layer", _bytes(m.get("kv_bytes_per_token_per_layer"))),
    ]
    if m.get("mamba_state_bytes_per_layer"):
        rows.append(("state bytes per layer", _bytes(m["mamba_state_bytes_per_layer"])))
    if m.get("sliding_window"):
        rows.append(("sliding window", f"{m['sliding_window']:,} tokens"))
    return rows


def _figure_rows(f: dict[str, Any]) -> list[tuple[str, str]]:
    layers = f"{f['num_layers']}: {f['num_full_attention_layers']} full attention"
    if f["num_sliding_window_layers"]:
        layers += f", {f['num_sliding_window_layers']} sliding window"
    if f["num_state_layers"]:
        layers += f", {f['num_state_layers']} recurrent (Mamba / GDN)"
    heads = (
        f"{f['num_attention_heads']} query, {f['num_kv_heads']} KV, head dim {f['head_dim']}"
        f" (value {f['v_head_dim']})"
    )
    ffn = f"{f['num_dense_mlp_layers']} dense (intermediate {f['intermediate_size']:,})"
    if f["num_moe_layers"]:
        ffn += (
            f", {f['num_moe_layers']} MoE ({f['num_experts']} experts, "
            f"{f['experts_per_token']} per token, intermediate {f['moe_intermediate_size']:,}"
        )
        if f["num_shared_experts"]:
            ffn += f"; {f['num_shared_experts']} shared of {f['shared_expert_intermediate_size']:,}"
        ffn += ")"
    params = f"{_billions(f['total_params'])} total, {_billions(f['active_params'])} active"
    apart = f"MTP {_billions(f['mtp_params'])}, vision {_billions(f['vision_params'])}"
    return [
        ("architecture", f["architecture"]),
        ("layers", layers),
        ("hidden size, vocabulary", f"{f['hidden_size']:,}, {f['vocab_size']:,}"),
        ("attention heads", heads),
        ("feed-forward layers", ffn),
        ("parameters", f"{params} per token ({apart} of the total)"),
        ("bytes per parameter", f"{f['weight_bytes_per_param']:.3f}"),
    ]


def step_shown(
    name: str, gpu: str, tensor_parallel: int
) -> Callable[[ModelFigures], dict[str, Any]]:
    """`model_show`'s `step` for `--gpu` and `--tensor-parallel`: the roofline's figures
    (`step_time.step_figures`) and what it is, rounded to 0.01 ms."""
    from analyzer.config.hardware import GPU_NAMES, GPUS
    from analyzer.config.step_time import RooflineStep, step_figures

    card = GPUS.get(gpu.lower())
    if card is None:
        raise ConfigError(f"--gpu {gpu!r}: unknown GPU; known: {', '.join(GPU_NAMES)}")

    def shown(figures: ModelFigures) -> dict[str, Any]:
        model = RooflineStep(figures, card, tensor_parallel, name=Path(name).stem)
        figs = step_figures(model)
        out = {k: {n: round(ms, 2) for n, ms in v.items()} for k, v in figs.items()}
        return {"step_model": model.describe(), **out}

    return shown


def show_lines(shown: dict[str, Any]) -> list[str]:
    """`model_show`'s dict as aligned `figure  value` lines."""
    lines = [f"model {shown['model']} ({shown['kind']}): {shown.get('description', '')}"]
    rows = _cache_rows(shown)
    rows.append(("weights", _bytes(shown.get("weights_bytes"))))
    if shown.get("figures"):
        rows += _figure_rows(shown["figures"])
    for key, values in shown.get("step", {}).items():
        if isinstance(values, dict):
            values = ", ".join(f"{k}: {v:,.2f}" for k, v in values.items())
        rows.append((key, values))
    width = max(len(label) for label, _ in rows)
    lines += [f"{label:<{width}}  {value}" for label, value in rows]
    lines.append(f"source: {shown.get('source', '-')}")
    return lines
