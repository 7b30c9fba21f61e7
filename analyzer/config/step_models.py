"""The step model a policy names: how long one scheduler step of the concurrent replay lasts.

- linear (and auto without a gpu): `step_base_ms` + `step_token_us` x the step's tokens, which
  the replay computes inline (None here: the replay keeps its own arithmetic);
- roofline (auto with a gpu): from the model's figures (its config.json), the GPU's peaks and
  the tensor parallelism (`analyzer.config.step_time.RooflineStep`);
- aic: NVIDIA AIConfigurator's measured tables for that model, GPU and tensor parallelism,
  tabulated once and cached on disk (`analyzer.config.aic_tables`, the `aic` extra).

A step model has `step_s(prefill, decode_requests, decode_context_tokens) -> seconds`:
`prefill` the step's prefill chunks as (new tokens, tokens already computed before them),
and its decodes as a count and the sum of their contexts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analyzer.config.hardware import GPUS
from analyzer.config.models import model_figures
from analyzer.config.policy import Policy, efficiency
from analyzer.config.step_time import RooflineStep


def step_model(policy: Policy) -> Any | None:
    """The policy's step model, or None for the linear step (the replay's inline sum)."""
    kind = policy.step_time
    if kind == "linear":
        return None
    gpu = GPUS[policy.gpu.lower()]
    if kind == "roofline":
        figures = model_figures(policy.model)
        return RooflineStep(
            figures, gpu, policy.tensor_parallel, efficiency(policy), name=_named(policy.model)
        )
    from analyzer.config.aic_tables import tabulated  # its tabulation imports the extra

    return tabulated(policy.model, gpu, policy.tensor_parallel)


def describe_steps(policy: Policy) -> str:
    """The step model in force, in one line (every output that prints a simulated time)."""
    kind = policy.step_time
    if kind == "linear":
        return (
            f"{policy.step_base_ms:g} ms + {policy.step_token_us:g} us per scheduled token "
            "(no GPU named: --gpu NAME prices each step from the model and the GPU)"
        )
    return step_model(policy).describe()


def _named(model: str) -> str:
    """A model as a person names it: a preset's name, a config's folder or file stem."""
    path = Path(model)
    if path.suffix != ".json" and not path.is_dir():
        return model
    return path.parent.name if path.name == "config.json" else path.stem
