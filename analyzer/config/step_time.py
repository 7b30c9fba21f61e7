"""How long one scheduler step lasts: the concurrent replay asks a step model once per
simulated step (50 k to 500 k times a replay), so `step_s` is plain float arithmetic on
constants worked out once in `__init__`.

A step is what vLLM's scheduler hands the model runner: prefill chunks, each as (new tokens,
tokens of that request already in the KV cache before the chunk, prefix-cache hits
included), and decoding requests, one new token each, given as their count and the sum of
their contexts (tokens already in the cache).

- `LinearStep`: `base_ms` + `token_us` x the step's tokens, the replay's default.
- `RooflineStep`: from the model's figures, the GPU's peaks and the tensor parallelism, a
  roofline in the manner of BLIS (inference-sim/inference-sim `sim/latency/roofline.go`,
  `rooflineStepTime`): the step's FLOPs at a fraction of peak against its bytes at a fraction
  of the memory bandwidth, the larger of the two, plus the tensor-parallel all-reduces and
  fixed overheads per step, per layer and per request (BLIS's trained-physics fit,
  `defaults.yaml` `trained_physics_coefficients`). docs/latency.md sets out the formulas and
  compares them with measurements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Protocol

from analyzer.config.hardware import GPU_NAMES, Gpu
from analyzer.config.model_figures import ModelFigures
from analyzer.errors import ConfigError

# FLOPs per byte of recurrent state per token (GDN, Mamba): the state update, decay and
# read-out touch each state element about six times, an element taking two bytes.
STATE_FLOPS_PER_BYTE = 3.0
# Bytes of one activation element (BF16): the hidden state written per token and layer and
# moved by the tensor-parallel all-reduces.
ACTIVATION_BYTES = 2
# `step_figures`: a prefill step of these many new tokens alone, and a decode step of these
# many requests with DECODE_CONTEXT tokens of context each.
PREFILL_FIGURES = (1024, 8192, 32768)
DECODE_FIGURES = (1, 32, 128)
DECODE_CONTEXT = 8192


class StepModel(Protocol):
    """What the replay asks of a step model."""

    def step_s(
        self,
        prefill: Sequence[tuple[int, int]],
        decode_requests: int,
        decode_context_tokens: int,
    ) -> float:
        """Seconds one step lasts: `prefill` its prefill chunks as (new tokens, tokens
        already computed), `decode_requests` its decoding requests (one new token each) and
        `decode_context_tokens` the sum of their contexts."""
        ...

    def describe(self) -> str:
        """The step model in one line, for every output that prints a simulated time."""
        ...


class LinearStep:
    """`base_ms` milliseconds + `token_us` microseconds per token the step schedules (each
    prefill chunk's new tokens and one per decoding request), whatever the model."""

    def __init__(self, base_ms: float, token_us: float) -> None:
        self.base_ms = base_ms
        self.token_us = token_us
        # The replay's own arithmetic: step_base_ms / 1000 + step_token_us / 1e6 x tokens.
        self._base_s = base_ms / 1000
        self._token_s = token_us / 1e6

    def step_s(
        self,
        prefill: Sequence[tuple[int, int]],
        decode_requests: int,
        decode_context_tokens: int,
    ) -> float:
        total = decode_requests
        for n, _ in prefill:
            total += n
        return self._base_s + self._token_s * total

    def describe(self) -> str:
        return f"linear: {self.base_ms:g} ms + {self.token_us:g} us per scheduled token"


@dataclass(frozen=True)
class Efficiency:
    """The roofline's fractions of peak and its fixed overheads, what `hpa calibrate` fits.

    Defaults (H100, vLLM): MFU 0.45 for prefill and 0.30 for decode FLOPs, BLIS's
    hardware_config.json (calibrated per inference-sim Discussion #589); bandwidth 0.7 of
    peak HBM, BLIS's trained-physics weight-loading factor (beta3 = 1.36, about 1 / 0.7);
    interconnect 0.7 of the rated link, llm-d-inference-sim's docs/latency-profiles.md
    ("effective link bandwidth is 60-80 % of rated"); 126 us a step, 32 us a layer and 4 us a
    request, BLIS's trained-physics beta7, beta5 and beta6 (defaults.yaml,
    trained_physics_coefficients: 126.02, 32.10, 4.42)."""

    mfu_prefill: float = 0.45
    mfu_decode: float = 0.30
    bandwidth: float = 0.7
    interconnect: float = 0.7
    step_us: float = 126.0
    layer_us: float = 32.0
    request_us: float = 4.0

    def __post_init__(self) -> None:
        for key in ("mfu_prefill", "mfu_decode", "bandwidth", "interconnect"):
            value = getattr(self, key)
            if not 0 < value <= 1:
                raise ConfigError(f"step efficiency {key} {value!r}: expected 0 < x <= 1")
        for key in ("step_us", "layer_us", "request_us"):
            value = getattr(self, key)
            if not 0 <= value < float("inf"):
                raise ConfigError(f"step overhead {key} {value!r}: expected a finite x >= 0")

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


DEFAULT_EFFICIENCY = Efficiency()
# BLIS's MFU where hardware_config.json has the GPU's own (Discussion #589); other GPUs take
# the H100's.
GPU_EFFICIENCY: dict[str, Efficiency] = {
    "A100": replace(DEFAULT_EFFICIENCY, mfu_prefill=0.38, mfu_decode=0.18),
    "L40S": replace(DEFAULT_EFFICIENCY, mfu_prefill=0.32, mfu_decode=0.08),
}


def default_efficiency(gpu: Gpu) -> Efficiency:
    """The efficiency a roofline on `gpu` takes unless given one."""
    return GPU_EFFICIENCY.get(gpu.name, DEFAULT_EFFICIENCY)


class RooflineStep:
    """A step's time from the model, the GPU and the tensor parallelism (docs/latency.md):

        max(compute, memory) + all-reduce + step_us + layers x layer_us
                                            + (chunks + decodes) x request_us

    compute: FLOPs / (TP x peak x MFU), prefill and decode at their own MFU; peak is the
    GPU's FP8 rate for weights of about a byte where it has one, else BF16;
      - linear layers: 2 x (active parameters - LM head) per token (the active parameters
        leave out the input embedding, a lookup), the LM head (2 x vocab x hidden) once per
        request (vLLM computes logits for each request's last token only);
      - attention: 2 x heads x (head_dim + v_head_dim) per (query, key) pair and attention
        layer; a chunk of n new tokens after p cached ones has n x (p + (n + 1) / 2) pairs,
        a decode (context c) c + 1; sliding-window layers count at most `window` keys;
      - recurrent layers: STATE_FLOPS_PER_BYTE x state bytes per token;
    memory: bytes / (TP x HBM bandwidth x efficiency);
      - weights once per step: the active parameters less their k routed experts a layer,
        plus the routed experts the step's B tokens touch, N x (1 - ((N - k) / N)^B) of N a
        layer (uniform routing, BLIS); so neither the input embedding (a lookup) nor the
        MTP layers and the vision encoder (`mtp_params`, `vision_params`) are read;
      - KV: each attention layer reads the cached tokens (at most `window` in
        sliding-window layers) and writes the new ones; with more GPUs than KV heads the
        heads are replicated, so the KV bytes divide by min(TP, KV heads), not TP;
      - recurrent state read and written once per request;
      - activations: hidden x 2 bytes per token and layer;
    all-reduce (TP > 1): 2 per layer of tokens x hidden x 2 bytes, a ring moving
    2 (TP - 1) / TP of that per GPU at the interconnect's rate x efficiency.

    Not modelled: expert parallelism, pipeline parallelism, quantised KV, speculative
    decoding, attention sinks, the overlap of communication with compute."""

    def __init__(
        self,
        figures: ModelFigures,
        gpu: Gpu,
        tensor_parallel: int = 1,
        efficiency: Efficiency | None = None,
        *,
        name: str | None = None,
    ) -> None:
        if type(tensor_parallel) is not int or tensor_parallel < 1:
            raise ConfigError(f"--tensor-parallel {tensor_parallel!r}: expected an integer >= 1")
        if not gpu.has_peaks:
            known = ", ".join(GPU_NAMES)
            raise ConfigError(
                f"the step-time roofline needs a GPU's peaks; {gpu.name} has none (--gpu {known})"
            )
        self.figures = figures
        self.gpu = gpu
        self.tensor_parallel = tensor_parallel
        self.efficiency = default_efficiency(gpu) if efficiency is None else efficiency
        self.name = name or figures.architecture
        # About a byte a parameter: FP8 weights, with their scales and BF16 embeddings.
        fp8 = 0.75 <= figures.weight_bytes_per_param < 1.5 and gpu.fp8_tflops is not None
        self.compute_dtype = "FP8" if fp8 else "BF16"
        peak = (gpu.fp8_tflops if fp8 else gpu.bf16_tflops) or 0.0
        self._compute_constants(figures, tensor_parallel * peak * 1e12)
        self._memory_constants(figures, gpu, tensor_parallel)
        self._overhead_constants(figures, gpu, tensor_parallel)

    def _compute_constants(self, f: ModelFigures, flops_s: float) -> None:
        """Seconds of compute per prefill/decode token, chunk and (query, key) pair."""
        e = self.efficiency
        prefill, decode = 1 / (flops_s * e.mfu_prefill), 1 / (flops_s * e.mfu_decode)
        head = f.vocab_size * f.hidden_size
        linear = 2.0 * max(0, f.active_params - head)
        token = linear + STATE_FLOPS_PER_BYTE * f.state_bytes_per_layer * f.num_state_layers
        pair = 2.0 * f.num_attention_heads * (f.head_dim + f.v_head_dim)
        full, windowed = _attention_layers(f)
        self._pf_token, self._dc_token = token * prefill, (token + 2.0 * head) * decode
        self._pf_chunk = 2.0 * head * prefill  # the LM head on each request's last token
        self._pf_pair, self._dc_pair = pair * full * prefill, pair * full * decode
        self._pf_wpair, self._dc_wpair = pair * windowed * prefill, pair * windowed * decode
        self._window = (f.sliding_window or 0) if windowed else 0

    def _memory_constants(self, f: ModelFigures, gpu: Gpu, tp: int) -> None:
        """Seconds of memory traffic per step (weights), token, cached token and request."""
        per_s = tp * (gpu.hbm_tb_s or 0.0) * 1e12 * self.efficiency.bandwidth
        w = f.weight_bytes_per_param
        # One routed expert in every MoE layer (SwiGLU: gate, up and down projections).
        expert = 3 * f.hidden_size * f.moe_intermediate_size * f.num_moe_layers
        routed = f.num_experts > 1 and expert > 0
        picked = f.experts_per_token * expert if routed else 0
        self._weights = max(0, f.active_params - picked) * w / per_s
        self._expert = expert * f.num_experts * w / per_s if routed else 0.0
        self._untouched = (f.num_experts - f.experts_per_token) / f.num_experts if routed else 0
        kv_per_s = per_s / tp * min(tp, max(1, f.num_kv_heads))  # replicated past the heads
        kv = f.kv_bytes_per_token_per_layer
        full, windowed = _attention_layers(f)
        self._kv_full, self._kv_window = kv * full / kv_per_s, kv * windowed / kv_per_s
        activations = ACTIVATION_BYTES * f.hidden_size * f.num_layers
        self._mem_token = kv * (full + windowed) / kv_per_s + activations / per_s
        self._state = 2.0 * f.state_bytes_per_layer * f.num_state_layers / per_s

    def _overhead_constants(self, f: ModelFigures, gpu: Gpu, tp: int) -> None:
        """All-reduce seconds per token; fixed seconds per step and per request."""
        e = self.efficiency
        ring = 2.0 * (tp - 1) / tp * ACTIVATION_BYTES * f.hidden_size * 2 * f.num_layers
        link = (gpu.interconnect_gb_s or 0.0) * 1e9 * e.interconnect
        self._allreduce = ring / link if tp > 1 else 0.0
        self._fixed = (e.step_us + f.num_layers * e.layer_us) / 1e6
        self._request = e.request_us / 1e6

    def step_s(
        self,
        prefill: Sequence[tuple[int, int]],
        decode_requests: int,
        decode_context_tokens: int,
    ) -> float:
        tokens = history = 0
        pairs = window_pairs = 0.0
        window_history = 0
        window = self._window
        for n, p in prefill:
            tokens += n
            history += p
            pairs += n * (p + (n + 1) * 0.5)
            if window:
                window_history += p if p < window else window
                first = p + 1  # keys the chunk's first token attends to
                if first >= window:
                    window_pairs += n * window
                else:
                    m = window - first + 1  # tokens before the window caps the keys
                    if m >= n:
                        window_pairs += n * (first + (n - 1) * 0.5)
                    else:
                        window_pairs += m * (first + (m - 1) * 0.5) + (n - m) * window
        b, c = decode_requests, decode_context_tokens
        total = tokens + b
        if total == 0:
            return 0.0
        requests = len(prefill) + b
        compute = (
            tokens * self._pf_token
            + len(prefill) * self._pf_chunk
            + pairs * self._pf_pair
            + window_pairs * self._pf_wpair
        )
        memory = self._weights + total * self._mem_token + requests * self._state
        memory += (history + c) * self._kv_full
        if self._expert:
            memory += self._expert * (1.0 - self._untouched**total)
        if b:
            compute += b * self._dc_token + (c + b) * self._dc_pair
            if window:
                # Each decode reads min(context, window) keys; from the sum alone, min(sum,
                # decodes x window), exact when every context is on the same side of it.
                capped = b * window
                compute += (c + b if c + b < capped else capped) * self._dc_wpair
                window_history += c if c < capped else capped
        memory += window_history * self._kv_window
        roof = compute if compute > memory else memory
        return roof + total * self._allreduce + self._fixed + requests * self._request

    def describe(self) -> str:
        return (
            f"roofline: {self.name} on {self.tensor_parallel} x {self.gpu.name}, "
            f"{self.compute_dtype}"
        )


def _attention_layers(figures: ModelFigures) -> tuple[int, int]:
    """(full-attention layers, sliding-window layers); sliding-window layers without a
    window count as full attention."""
    full, windowed = figures.num_full_attention_layers, figures.num_sliding_window_layers
    return (full, windowed) if figures.sliding_window else (full + windowed, 0)


def step_figures(model: StepModel) -> dict[str, dict[str, float]]:
    """The step model's figures, in ms: `prefill_ms` for a prefill step of 1,024, 8,192 and
    32,768 new tokens alone (nothing cached), `decode_ms` for a decode step of 1, 32 and 128
    requests with 8,192 tokens of context each; keyed by those numbers as strings."""
    return {
        "prefill_ms": {str(n): model.step_s([(n, 0)], 0, 0) * 1e3 for n in PREFILL_FIGURES},
        "decode_ms": {
            str(b): model.step_s([], b, b * DECODE_CONTEXT) * 1e3 for b in DECODE_FIGURES
        },
    }
