"""Commands on models: `hpa model show`."""

from __future__ import annotations

import click

from analyzer.cli.base import cli, json_format_option


@cli.group("model")
def model_group() -> None:
    """Model presets and Hugging Face config.json files: what hpa derives from them."""


@model_group.command("show")
@click.argument("model", required=False)
@json_format_option("json: one JSON object with every figure.")
@click.option(
    "--gpu",
    default=None,
    metavar="NAME",
    help="Also the step model's figures on this GPU: a prefill step of 1,024, 8,192 and "
    "32,768 new tokens alone, a decode step at batch 1, 32 and 128 with 8,192 tokens of "
    "context each (the roofline, docs/latency.md).",
)
@click.option(
    "--tensor-parallel",
    "tensor_parallel",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="GPUs the model is split over, for --gpu.",
)
def show_cmd(model: str | None, fmt: str, gpu: str | None, tensor_parallel: int) -> None:
    """Print what hpa derives for MODEL (a preset name, a preset-layout .json or a Hugging
    Face config.json): vLLM 0.33's cache groups, block size, bytes per block and per state,
    KV bytes per token, the weights' bytes and the model's compute figures."""
    from analyzer.config.model_show import model_show, show_lines, step_shown
    from analyzer.config.models import model_names

    if model is None:  # click's own line would not say what MODEL may be
        raise click.UsageError(
            f"Missing argument 'MODEL': a preset ({', '.join(model_names())}), a "
            "preset-layout .json or a Hugging Face config.json."
        )

    step = step_shown(model, gpu, tensor_parallel) if gpu is not None else None
    shown = model_show(model, step)
    if fmt == "json":
        import json

        click.echo(json.dumps(shown, indent=2))
        return
    for line in show_lines(shown):
        click.echo(line)
