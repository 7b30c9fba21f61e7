"""How long one scheduler step lasts: the concurrent replay asks a step model once per
simulated step (50 k to 500 k times a replay), so `step_s` is plain float arithmetic on
constants worked out once in `__init__`.

A step is what vLLM's scheduler hands the model runner: prefill chunks, each as (new tokens,
tokens of that request already in the KV cache before the chunk, prefix-cache hits
included), and decoding requests, one new token each, given as their count and the sum of
their contexts (tokens already in the cache).

- `LinearStep`: `base_ms` + `token_us` x the step's tokens, the replay's default.
- `RooflineStep`: from the model's figures, the GPU's peaks and the tensor parallelism, a
  roofline in the manner of BLIS (inference-sim/inference-sim `sim/latency/roofline.go`)
  taken part by part (dense GEMMs, routed experts, attention, recurrent state, activations,
  all-reduces, fixed times), its efficiencies fitted to NVIDIA AIConfigurator's measured
  kernels (tools/fit_step/). docs/latency.md sets out the formulas and the validation.
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
# Bytes of one activation element (BF16), as the tensor-parallel all-reduces move them.
ACTIVATION_BYTES = 2
# Activation traffic per token: each layer's two RMSNorms with their residual adds read the
# hidden state and the residual and write both back (2 x 4 elements of 2 bytes, on every
# GPU); a SwiGLU reads gate and up and writes their product (3 x 2 bytes per element of the
# intermediate size, split by TP).
ACTIVATION_HIDDEN_BYTES = 16
ACTIVATION_GATE_BYTES = 6
# `step_figures`: a prefill step of these many new tokens alone, and a decode step of these
# many requests with DECODE_CONTEXT tokens of context each.
PREFILL_FIGURES = (1024, 8192, 32768)
DECODE_FIGURES = (1, 32, 128)
DECODE_CONTEXT = 8192
# `RooflineStep.parts`: what a step's time is made of.
PARTS = ("dense", "moe", "attention", "state", "elementwise", "comm")


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
    """The roofline's fractions of the GPU's peaks and its fixed times (docs/latency.md).

    Fractions: `mfu_prefill`, the dense GEMMs' MFU at many tokens, falling as t / (t +
    `gemm_half_tokens`) for a step of t tokens; `bandwidth`, the rate the dense weights and
    the activations stream at; `mfu_attention`, attention's FLOPs; `kv_bandwidth`, its KV
    and the recurrent state; `mfu_moe`, the routed experts' GEMMs, falling as w / (w +
    `moe_half_width`) for an expert slice w = moe_intermediate_size / TP wide, and
    `moe_bandwidth`, their weights; `mfu_moe_w4` and `w4_bandwidth`, the same for 4-bit
    experts (gpt-oss's MXFP4: MFU instead of mfu_moe, bandwidth x w4_bandwidth); `fp8`,
    `fp8_moe` and `fp8_bandwidth`, what FP8 (block-scaled) weights' GEMMs get of mfu_prefill,
    of mfu_moe, and of bandwidth and moe_bandwidth; `mfu_state`, the recurrent layers' prefill
    (STATE_FLOPS_PER_BYTE a byte of state a token); `interconnect`, the all-reduce's share of
    the link. Fixed times, microseconds: a step (`step_us`), a layer (`layer_us`), an
    attention layer (`attention_layer_us`, and `prefill_attention_us` more in a step with
    prefill), a MoE layer (`moe_layer_us`), a request (`request_us`), an all-reduce
    (`allreduce_us`, TP > 1).

    The form is BLIS's roofline (inference-sim/inference-sim, sim/latency/roofline.go) taken
    part by part. The values: least squares on the log error against NVIDIA AIConfigurator
    0.12.0's measured kernels (vLLM 0.24 backend) over 58 (model, GPU, TP) settings, with
    issue 44's 6 validation figures held out: tools/fit_step/fit.py on
    tools/fit_step/aic_points.json and aic_parts.json, fitted 2026-12-06, its output in
    tools/fit_step/fit_result.json. These defaults are the H100's; GPU_EFFICIENCY has the
    others."""

    mfu_prefill: float = 0.829
    gemm_half_tokens: float = 87.9
    bandwidth: float = 0.721
    mfu_attention: float = 0.625
    kv_bandwidth: float = 0.914
    mfu_moe: float = 0.747
    moe_half_width: float = 380.0
    moe_bandwidth: float = 1.0
    mfu_state: float = 0.0739
    mfu_moe_w4: float = 0.506
    w4_bandwidth: float = 0.766
    fp8: float = 0.65
    fp8_moe: float = 0.619
    fp8_bandwidth: float = 0.423
    interconnect: float = 0.569
    step_us: float = 0.0
    layer_us: float = 0.0
    attention_layer_us: float = 12.2
    prefill_attention_us: float = 21.4
    moe_layer_us: float = 41.4
    request_us: float = 4.59
    allreduce_us: float = 6.4

    def __post_init__(self) -> None:
        for key in FRACTIONS:
            value = getattr(self, key)
            if not 0 < value <= 1:
                raise ConfigError(f"step efficiency {key} {value!r}: expected 0 < x <= 1")
        for key in TIMES:
            value = getattr(self, key)
            if not 0 <= value < float("inf"):
                raise ConfigError(f"step overhead {key} {value!r}: expected a finite x >= 0")

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


FRACTIONS = (
    "mfu_prefill",
    "bandwidth",
    "mfu_attention",
    "kv_bandwidth",
    "mfu_moe",
    "moe_bandwidth",
    "mfu_state",
    "mfu_moe_w4",
    "w4_bandwidth",
    "fp8",
    "fp8_moe",
    "fp8_bandwidth",
    "interconnect",
)
TIMES = (
    "gemm_half_tokens",
    "moe_half_width",
    "step_us",
    "layer_us",
    "attention_layer_us",
    "prefill_attention_us",
    "moe_layer_us",
    "request_us",
    "allreduce_us",
)
DEFAULT_EFFICIENCY = Efficiency()
# Fitted per GPU as above (tools/fit_step/fit_result.json). Not fitted, the search's start:
# the A100's mfu_moe_w4 (AIConfigurator has no gpt-oss on A100) and the L40S's interconnect
# (no TP > 1 on PCIe); the L40S's mfu_moe (at its bound) rests on FP8 experts alone. The
# MI300X (no AIConfigurator data) takes the H100's.
GPU_EFFICIENCY: dict[str, Efficiency] = {
    "H100": DEFAULT_EFFICIENCY,
    "H200": replace(
        DEFAULT_EFFICIENCY, mfu_prefill=0.838, bandwidth=0.663, mfu_attention=0.63,
        kv_bandwidth=0.837, mfu_moe=0.806, moe_bandwidth=0.929, mfu_moe_w4=0.443,
        interconnect=0.493, moe_layer_us=47.8,
    ),
    "B200": replace(
        DEFAULT_EFFICIENCY, mfu_prefill=0.705, bandwidth=0.601, mfu_attention=0.525,
        kv_bandwidth=0.867, mfu_moe=0.739, moe_bandwidth=0.905, mfu_moe_w4=0.227,
        interconnect=0.306, moe_layer_us=28.6,
    ),
    "A100": replace(
        DEFAULT_EFFICIENCY, mfu_prefill=0.873, bandwidth=0.67, mfu_attention=0.57,
        kv_bandwidth=0.71, mfu_moe=0.503, moe_bandwidth=0.968, mfu_moe_w4=0.5,
        interconnect=0.371, moe_layer_us=46.6,
    ),
    "L40S": replace(
        DEFAULT_EFFICIENCY, mfu_prefill=0.641, bandwidth=0.657, mfu_attention=0.479,
        kv_bandwidth=0.824, mfu_moe=1.0, mfu_moe_w4=0.654, interconnect=0.7, moe_layer_us=38.6,
    ),
}  # fmt: skip


def default_efficiency(gpu: Gpu) -> Efficiency:
    """The efficiency a roofline on `gpu` takes unless given one."""
    return GPU_EFFICIENCY.get(gpu.name, DEFAULT_EFFICIENCY)


class RooflineStep:
    """A step's time from the model, the GPU and the tensor parallelism (docs/latency.md): the
    parts a forward pass runs one after another, each a roofline at its own efficiency (the
    Efficiency's names), per GPU of TP:

        max(dense GEMM FLOPs / (peak x MFU(t)), dense weights / (HBM x bandwidth))
      + experts touched / (HBM x moe_bandwidth) + expert FLOPs / (peak x mfu_moe(w))
      + max(attention FLOPs / (BF16 x mfu_attention), KV bytes / (HBM x kv_bandwidth))
      + state FLOPs / (BF16 x mfu_state) + state bytes / (HBM x kv_bandwidth)
      + activation bytes / (HBM x bandwidth) + all-reduces
      + step_us + layers x layer_us + attention layers x attention_layer_us
        (+ prefill_attention_us each with prefill) + MoE layers x moe_layer_us
        + requests x request_us

    t is the step's tokens (new prompt tokens + one per decode). Peak: the GPU's FP8 rate
    for weights of about a byte where it has one, else BF16; attention and the recurrent
    scan run in BF16 whatever the weights.
      - dense GEMMs: 2 x (active parameters - routed experts - LM head) per token, the LM
        head (2 x vocab x hidden) once per request (vLLM computes each request's last
        logits only); their weights read once a step, the routed experts' excepted;
      - routed experts: 2 x k experts per token; the weights of the experts the t tokens
        touch, N x (1 - ((N - k) / N)^t) of N a layer (uniform routing, BLIS); compute and
        weights added, not overlapped (MFU(m) = mfu x m / (m + m_half) for m tokens an
        expert, with m_half at the machine balance, is that sum);
      - attention: 2 x heads x (head_dim + v_head_dim) per (query, key) pair and attention
        layer; a chunk of n new tokens after p cached ones has n x (p + (n + 1) / 2) pairs,
        a decode (context c) c + 1; sliding-window layers count at most `window` keys; KV:
        each attention layer reads the cached tokens (at most `window` in sliding-window
        layers) and writes the new ones; past the KV-head count vLLM replicates KV heads, so
        KV bytes divide by min(TP, KV heads);
      - recurrent layers: STATE_FLOPS_PER_BYTE x state bytes per token; the state read and
        written once per request;
      - activations: ACTIVATION_HIDDEN_BYTES x hidden per token and layer (on every GPU),
        ACTIVATION_GATE_BYTES per element of the dense and shared MLPs (split by TP);
      - all-reduce (TP > 1): 2 a layer, each tokens x hidden x 2 bytes through each GPU's
        link at `interconnect` of its rate (NVSwitch reduces in the switch: AIConfigurator's
        NCCL times give about the same bytes a second at TP 2, 4 and 8), + allreduce_us.

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
        self._compute_constants(figures, tensor_parallel * 1e12, peak, gpu.bf16_tflops or 0.0)
        self._memory_constants(figures, gpu, tensor_parallel)
        self._overhead_constants(figures, gpu, tensor_parallel)

    def _compute_constants(self, f: ModelFigures, scale: float, peak: float, bf16: float) -> None:
        """Seconds of compute per token, request and (query, key) pair: the linear layers
        at `peak` (FP8 for FP8 weights), attention and the recurrent scan at the BF16 rate;
        TFLOP/s x `scale` is FLOP/s over the TP GPUs."""
        flops_s, bf16_s = peak * scale, bf16 * scale
        e = self.efficiency
        fp8 = e.fp8 if self.compute_dtype == "FP8" else 1.0
        fp8_moe = e.fp8_moe if self.compute_dtype == "FP8" else 1.0
        head = f.vocab_size * f.hidden_size
        expert, routed = _expert_params(f)
        picked = f.experts_per_token * expert * f.num_moe_layers if routed else 0
        dense = 2.0 * max(0, f.active_params - head - picked)
        gemm_s = flops_s * e.mfu_prefill * fp8
        self._gemm_token = dense / gemm_s
        self._gemm_half = e.gemm_half_tokens
        self._gemm_request = 2.0 * head / gemm_s
        # Each GPU's slice of an expert is moe_intermediate_size / TP wide: narrow slices
        # leave the tensor cores idle (mfu_moe x w / (w + moe_half_width)).
        width = f.moe_intermediate_size / self.tensor_parallel
        # 4-bit experts (gpt-oss's MXFP4) dequantise to BF16 in the GEMM's inner loop.
        w4 = (f.expert_bytes_per_param or 2.0) < 0.75
        mfu_moe = (e.mfu_moe_w4 if w4 else e.mfu_moe) * fp8_moe
        mfu_moe *= width / (width + e.moe_half_width) if width else 1.0
        self._moe_token = 2.0 * picked / (flops_s * mfu_moe)
        state = STATE_FLOPS_PER_BYTE * f.state_bytes_per_layer * f.num_state_layers
        self._state_token = state / (bf16_s * e.mfu_state)
        pair = (
            2.0 * f.num_attention_heads * (f.head_dim + f.v_head_dim) / (bf16_s * e.mfu_attention)
        )
        full, windowed = _attention_layers(f)
        self._pair, self._wpair = pair * full, pair * windowed
        self._window = (f.sliding_window or 0) if windowed else 0

    def _memory_constants(self, f: ModelFigures, gpu: Gpu, tp: int) -> None:
        """Seconds of memory traffic per step (weights), token, cached token and request."""
        e = self.efficiency
        fp8 = e.fp8_bandwidth if self.compute_dtype == "FP8" else 1.0
        per_s = tp * (gpu.hbm_tb_s or 0.0) * 1e12
        expert, routed = _expert_params(f)
        experts = expert * f.num_experts * f.num_moe_layers if routed else 0
        picked = f.experts_per_token * expert * f.num_moe_layers if routed else 0
        ebytes = f.expert_bytes_per_param or f.weight_bytes_per_param
        rest = f.total_params - experts
        # The bytes of a parameter outside the routed experts (MXFP4 experts: BF16 the rest).
        other = f.weight_bytes_per_param
        if ebytes != other and experts and rest > 0:
            other = max(0.0, f.weights_bytes - experts * ebytes) / rest or other
        self._weights = max(0, f.active_params - picked) * other / (per_s * e.bandwidth * fp8)
        w4 = e.w4_bandwidth if ebytes < 0.75 else 1.0  # 4-bit experts: dequantised as read
        self._expert = experts * ebytes / (per_s * e.moe_bandwidth * fp8 * w4)
        self._untouched = (f.num_experts - f.experts_per_token) / f.num_experts if routed else 0
        kv_per_s = per_s / tp * min(tp, max(1, f.num_kv_heads)) * e.kv_bandwidth
        kv = f.kv_bytes_per_token_per_layer
        full, windowed = _attention_layers(f)
        self._kv_full, self._kv_window = kv * full / kv_per_s, kv * windowed / kv_per_s
        self._kv_write = kv * (full + windowed) / kv_per_s
        self._state = 2.0 * f.state_bytes_per_layer * f.num_state_layers / (per_s * e.kv_bandwidth)
        norms = ACTIVATION_HIDDEN_BYTES * f.hidden_size * f.num_layers * tp
        gates = f.intermediate_size * f.num_dense_mlp_layers + (
            f.shared_expert_intermediate_size * f.num_shared_experts * f.num_moe_layers
        )
        self._activations = (norms + ACTIVATION_GATE_BYTES * gates) / (per_s * e.bandwidth)

    def _overhead_constants(self, f: ModelFigures, gpu: Gpu, tp: int) -> None:
        """All-reduce seconds per token; fixed seconds per step and per request."""
        e = self.efficiency
        reduces = 2 * f.num_layers if tp > 1 else 0
        message = ACTIVATION_BYTES * f.hidden_size * reduces
        link = (gpu.interconnect_gb_s or 0.0) * 1e9 * e.interconnect
        self._allreduce = message / link if tp > 1 else 0.0
        full, windowed = _attention_layers(f)
        self._prefill_fixed = (full + windowed) * e.prefill_attention_us / 1e6
        self._attention_fixed = (full + windowed) * e.attention_layer_us / 1e6
        self._moe_fixed = f.num_moe_layers * e.moe_layer_us / 1e6
        self._reduce_fixed = reduces * e.allreduce_us / 1e6
        fixed = (e.step_us + f.num_layers * e.layer_us) / 1e6 + self._attention_fixed
        fixed += self._moe_fixed if self._expert else 0.0
        self._fixed = fixed + self._reduce_fixed
        self._request = e.request_us / 1e6

    def _tally(self, prefill: Sequence[tuple[int, int]], b: int, c: int) -> tuple:
        """(tokens, requests, cached tokens read in full and in sliding-window layers,
        (query, key) pairs in full and in sliding-window layers) of a step."""
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
        if b and window:
            # Each decode reads min(context, window) keys; from the sum alone, min(sum,
            # decodes x window), exact when every context is on the same side of it.
            capped = b * window
            window_pairs += c + b if c + b < capped else capped
            window_history += c if c < capped else capped
        return (
            tokens + b,
            len(prefill) + b,
            history + c,
            window_history,
            pairs + c + b,
            window_pairs,
        )

    def step_s(
        self,
        prefill: Sequence[tuple[int, int]],
        decode_requests: int,
        decode_context_tokens: int,
    ) -> float:
        total, requests, history, window_history, pairs, window_pairs = self._tally(
            prefill, decode_requests, decode_context_tokens
        )
        if total == 0:
            return 0.0
        gemm = (total + self._gemm_half) * self._gemm_token + requests * self._gemm_request
        step = gemm if gemm > self._weights else self._weights
        if self._expert:
            step += self._expert * (1.0 - self._untouched**total) + total * self._moe_token
        flops = pairs * self._pair + window_pairs * self._wpair
        kv = history * self._kv_full + window_history * self._kv_window + total * self._kv_write
        step += flops if flops > kv else kv
        step += total * (self._state_token + self._activations + self._allreduce)
        if prefill:
            step += self._prefill_fixed
        return step + requests * (self._state + self._request) + self._fixed

    def parts(
        self,
        prefill: Sequence[tuple[int, int]],
        decode_requests: int,
        decode_context_tokens: int,
    ) -> dict[str, float]:
        """`step_s` by part, in seconds (they add up to it): dense GEMMs, routed experts,
        attention, recurrent state, element-wise (activations, per-layer and per-request
        times), communication; each part with its fixed times."""
        total, requests, history, window_history, pairs, window_pairs = self._tally(
            prefill, decode_requests, decode_context_tokens
        )
        if total == 0:
            return dict.fromkeys(PARTS, 0.0)
        gemm = (total + self._gemm_half) * self._gemm_token + requests * self._gemm_request
        moe = self._expert * (1.0 - self._untouched**total) + total * self._moe_token
        flops = pairs * self._pair + window_pairs * self._wpair
        kv = history * self._kv_full + window_history * self._kv_window + total * self._kv_write
        e = self.efficiency
        return {
            "dense": max(gemm, self._weights),
            "moe": moe + (self._moe_fixed if self._expert else 0.0),
            "attention": max(flops, kv) + self._attention_fixed
            + (self._prefill_fixed if prefill else 0.0),
            "state": total * self._state_token + requests * self._state,
            "elementwise": total * self._activations + requests * self._request
            + (e.step_us + self.figures.num_layers * e.layer_us) / 1e6,
            "comm": total * self._allreduce + self._reduce_fixed,
        }  # fmt: skip

    def describe(self) -> str:
        return (
            f"roofline: {self.name} on {self.tensor_parallel} x {self.gpu.name}, "
            f"{self.compute_dtype}"
        )


def _expert_params(figures: ModelFigures) -> tuple[float, bool]:
    """(parameters of one routed expert in one MoE layer, whether the model has routed
    experts): from `routed_expert_params` where known, else SwiGLU's 3 x hidden x
    moe_intermediate_size."""
    f = figures
    if f.num_experts <= 1 or f.num_moe_layers == 0:
        return 0.0, False
    if f.routed_expert_params:
        return f.routed_expert_params / (f.num_experts * f.num_moe_layers), True
    expert = 3 * f.hidden_size * f.moe_intermediate_size
    return float(expert), expert > 0


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
