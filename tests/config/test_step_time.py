"""The step models (`analyzer.config.step_time`): the linear step is the replay's own sum to
the bit; the roofline counts each step's FLOPs and bytes as written out here by hand, for
five real models (figures from their Hugging Face config.json), and never runs faster with
more work or slower with more GPUs."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.config.hardware import GPUS, Gpu, gpu_memory
from analyzer.config.model_figures import ModelFigures
from analyzer.config.step_time import (
    DEFAULT_EFFICIENCY,
    Efficiency,
    LinearStep,
    RooflineStep,
    default_efficiency,
    step_figures,
)
from analyzer.errors import ConfigError

H100, H200, B200, A100, L40S = (GPUS[n] for n in ("h100", "h200", "b200", "a100", "l40s"))


def figures(**values) -> ModelFigures:
    """A model's figures: what is not given is absent (no window, no state, no experts)."""
    base = {
        "v_head_dim": values["head_dim"],
        "num_sliding_window_layers": 0,
        "sliding_window": None,
        "num_state_layers": 0,
        "state_bytes_per_layer": 0,
        "intermediate_size": 0,
        "num_dense_mlp_layers": 0,
        "num_moe_layers": 0,
        "num_experts": 0,
        "experts_per_token": 0,
        "moe_intermediate_size": 0,
        "num_shared_experts": 0,
        "shared_expert_intermediate_size": 0,
        "weight_bytes_per_param": 2,
        "kv_bytes_per_element": 2,
    }
    return ModelFigures(**{**base, **values})


# Parameter counts from each config.json (aiconfigurator-core 0.12.0's model_configs/), as
# `analyzer.config.hf_params` counts them: embeddings and LM head vocab x hidden each
# (untied), attention q/k/v/o (+ norms, biases), SwiGLU 3 x hidden x intermediate per (expert)
# MLP, routers, GDN projections and conv; the total with the MTP layers and the vision
# encoder. Active: the language model less the input embedding, with experts_per_token routed
# experts a layer.
LLAMA_70B = figures(  # meta-llama/Meta-Llama-3.1-70B: 70.6 B on the model card
    architecture="LlamaForCausalLM",
    num_layers=80,
    hidden_size=8192,
    vocab_size=128256,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=128,
    num_full_attention_layers=80,
    kv_bytes_per_token_per_layer=2 * 8 * 128 * 2,  # K and V, 8 heads x 128, BF16
    intermediate_size=28672,
    num_dense_mlp_layers=80,
    total_params=70_553_706_496,  # 80 x 855,654,400 + 2 x 128256 x 8192 + 8192
    active_params=69_503_033_344,  # less the embedding, 128256 x 8192
)
QWEN3_30B = figures(  # Qwen/Qwen3-30B-A3B: 30.5 B total, 3.3 B active on the model card
    architecture="Qwen3MoeForCausalLM",
    num_layers=48,
    hidden_size=2048,
    vocab_size=151936,
    num_attention_heads=32,
    num_kv_heads=4,
    head_dim=128,
    num_full_attention_layers=48,
    kv_bytes_per_token_per_layer=2 * 4 * 128 * 2,
    num_moe_layers=48,
    num_experts=128,
    experts_per_token=8,
    moe_intermediate_size=768,
    total_params=30_532_122_624,
    active_params=3_041_867_776,
)
QWEN35_35B = figures(  # Qwen/Qwen3.5-35B-A3B (hybrid GDN MoE; vision encoder, 1 MTP layer)
    architecture="Qwen3_5MoeForConditionalGeneration",
    num_layers=40,
    hidden_size=2048,
    vocab_size=248320,
    num_attention_heads=16,
    num_kv_heads=2,
    head_dim=256,
    num_full_attention_layers=10,
    kv_bytes_per_token_per_layer=2 * 2 * 256 * 2,
    num_state_layers=30,
    # GDN: temporal 32 x 128 x 128 x 4 B (mamba_ssm_dtype float32) + conv 8192 x 3 x 2 B
    state_bytes_per_layer=32 * 128 * 128 * 4 + 8192 * 3 * 2,
    num_moe_layers=40,
    num_experts=256,
    experts_per_token=8,
    moe_intermediate_size=512,
    num_shared_experts=1,
    shared_expert_intermediate_size=512,
    total_params=35_951_822_704,  # 34,660,610,688 + MTP 844,640,768 + vision 446,571,248
    active_params=2_946_429_568,
    mtp_params=844_640_768,
    vision_params=446_571_248,
)
QWEN3_NEXT = figures(  # Qwen/Qwen3-Next-80B-A3B (hybrid GDN MoE, 1 MTP layer)
    architecture="Qwen3NextForCausalLM",
    num_layers=48,
    hidden_size=2048,
    vocab_size=151936,
    num_attention_heads=16,
    num_kv_heads=2,
    head_dim=256,
    num_full_attention_layers=12,
    kv_bytes_per_token_per_layer=2048,
    num_state_layers=36,
    state_bytes_per_layer=1_097_728,  # BF16 state, as the qwen3-next-80b-a3b preset
    num_moe_layers=48,
    num_experts=512,
    experts_per_token=10,
    moe_intermediate_size=512,
    num_shared_experts=1,
    shared_expert_intermediate_size=512,
    total_params=81_324_862_720,  # 79,674,391,296 (the published count) + MTP 1,650,471,424
    active_params=3_563_764_480,
    mtp_params=1_650_471_424,
)
GPT_OSS_120B = figures(  # openai/gpt-oss-120b: 116.8 B total; MXFP4 experts, BF16 the rest
    architecture="GptOssForCausalLM",
    num_layers=36,
    hidden_size=2880,
    vocab_size=201088,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=64,
    num_full_attention_layers=18,
    num_sliding_window_layers=18,
    sliding_window=128,
    kv_bytes_per_token_per_layer=2 * 8 * 64 * 2,
    num_moe_layers=36,
    num_experts=128,
    experts_per_token=4,
    moe_intermediate_size=2880,
    total_params=116_829_156_672,
    active_params=5_132_849_472,  # OpenAI's 5.1 B
    weight_bytes_per_param=0.5585,  # 65.25 GB of checkpoint / 116.83 B parameters
)
MODELS = [LLAMA_70B, QWEN3_30B, QWEN35_35B, QWEN3_NEXT, GPT_OSS_120B]

# A GPU that computes at 1 TFLOP/s with boundless memory and links: step_s is the FLOPs'
# time alone; and one that moves 1 TB/s and computes without limit: the bytes' time alone.
COMPUTE_ONLY = Gpu("compute", 80.0, 1.0, None, 1e15, 1e15)
MEMORY_ONLY = Gpu("memory", 80.0, 1e15, None, 1.0, 1e15)
BARE = Efficiency(1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0)  # peak everything, no overheads


def flops(model: ModelFigures, prefill, decodes=0, context=0) -> float:
    """The step's FLOPs, from the step model on COMPUTE_ONLY."""
    return RooflineStep(model, COMPUTE_ONLY, 1, BARE).step_s(prefill, decodes, context) * 1e12


def bytes_moved(model: ModelFigures, prefill, decodes=0, context=0, tp=1) -> float:
    """The step's bytes over all GPUs, from the step model on MEMORY_ONLY."""
    return RooflineStep(model, MEMORY_ONLY, tp, BARE).step_s(prefill, decodes, context) * tp * 1e12


# ------------------------------------------------------------------------------------------
# The linear step


@settings(max_examples=300, deadline=None)
@given(
    base_ms=st.floats(0, 1e3),
    token_us=st.floats(0, 1e3),
    chunks=st.lists(st.tuples(st.integers(1, 10**5), st.integers(0, 10**6)), max_size=8),
    decodes=st.integers(0, 1024),
    context=st.integers(0, 10**8),
)
def test_linear_step_is_the_replays_sum_to_the_bit(base_ms, token_us, chunks, decodes, context):
    # analyzer/sim/vllm/concurrent.py: step_base_s + step_token_s x tokens scheduled
    step_base_s, step_token_s = base_ms / 1000, token_us / 1e6
    total = sum(n for n, _ in chunks) + decodes
    got = LinearStep(base_ms, token_us).step_s(chunks, decodes, context)
    assert got == step_base_s + step_token_s * total


def test_linear_step_figures_and_description():
    model = LinearStep(5.0, 100.0)
    assert model.describe() == "linear: 5 ms + 100 us per scheduled token"
    assert step_figures(model) == {
        "prefill_ms": {"1024": pytest.approx(107.4), "8192": pytest.approx(824.2),
                       "32768": pytest.approx(3281.8)},
        "decode_ms": {"1": pytest.approx(5.1), "32": pytest.approx(8.2),
                      "128": pytest.approx(17.8)},
    }  # fmt: skip


# ------------------------------------------------------------------------------------------
# What the roofline counts: FLOPs and bytes, by hand


def lm_head(m: ModelFigures) -> int:
    return m.vocab_size * m.hidden_size


def linear_params(m: ModelFigures) -> int:
    """Parameters a token multiplies: the active ones less the LM head (once a request)."""
    return m.active_params - lm_head(m)


FLOP_ROWS = [
    # Llama-3.1-70B, 8,192 new tokens: 2 x 68.45 B per token, the LM head once, attention
    # 4 x 64 heads x 128 x 8192 x (8192 + 1) / 2 pairs in each of 80 layers.
    (
        LLAMA_70B,
        [(8192, 0)],
        2 * 68_452_360_192 * 8192 + 2 * 128256 * 8192 + 80 * 4 * 64 * 128 * 8192 * 8193 / 2,
    ),
    # A 1,024-token chunk after 7,168 cached tokens: pairs 1024 x (7168 + 1025 / 2).
    (
        LLAMA_70B,
        [(1024, 7168)],
        2 * 68_452_360_192 * 1024 + 2 * 128256 * 8192 + 80 * 4 * 64 * 128 * 1024 * (7168 + 512.5),
    ),
    # Qwen3.5-35B-A3B: 2.437 B linear parameters a token, 10 attention layers of 16 heads x
    # 256, 30 GDN layers at 3 FLOPs a state byte.
    (
        QWEN35_35B,
        [(8192, 0)],
        2 * (2_946_429_568 - 248320 * 2048) * 8192
        + 2 * 248320 * 2048
        + 10 * 4 * 16 * 256 * 8192 * 8193 / 2
        + 30 * 3 * 2_146_304 * 8192,
    ),
    # gpt-oss-120b, 1,024 tokens after 4,096 cached: full layers see 4096 + i + 1 keys,
    # sliding-window layers 128.
    (
        GPT_OSS_120B,
        [(1024, 4096)],
        2 * linear_params(GPT_OSS_120B) * 1024
        + 2 * lm_head(GPT_OSS_120B)
        + 18 * 4 * 64 * 64 * (1024 * (4096 + 512.5) + 1024 * 128),
    ),
    # gpt-oss-120b, 200 tokens from scratch: the window caps token i at min(i + 1, 128) keys:
    # 128 x 129 / 2 + 72 x 128.
    (
        GPT_OSS_120B,
        [(200, 0)],
        2 * linear_params(GPT_OSS_120B) * 200
        + 2 * lm_head(GPT_OSS_120B)
        + 18 * 4 * 64 * 64 * (200 * 100.5 + 128 * 129 / 2 + 72 * 128),
    ),
    # Decodes: 32 requests of 8,192 tokens of context, each with its LM head; 8,193 keys in
    # full layers, 128 in windowed ones.
    (
        GPT_OSS_120B,
        ([], 32, 32 * 8192),
        (2 * linear_params(GPT_OSS_120B) + 2 * lm_head(GPT_OSS_120B)) * 32
        + 18 * 4 * 64 * 64 * 32 * (8193 + 128),
    ),
    (
        QWEN3_30B,
        ([], 128, 128 * 8192),
        (2 * linear_params(QWEN3_30B) + 2 * lm_head(QWEN3_30B)) * 128
        + 48 * 4 * 32 * 128 * 128 * 8193,
    ),
]


@pytest.mark.parametrize(("model", "step", "expected"), FLOP_ROWS)
def test_flops_of_a_step(model, step, expected):
    prefill, decodes, context = (step, 0, 0) if isinstance(step, list) else step
    assert flops(model, prefill, decodes, context) == pytest.approx(expected, rel=1e-12)


def expert(m: ModelFigures) -> int:
    """One routed expert in every MoE layer: 3 x hidden x its intermediate size a layer."""
    return m.num_moe_layers * 3 * m.hidden_size * m.moe_intermediate_size


def shared(m: ModelFigures) -> int:
    """The weights every step reads: the active ones less their routed experts."""
    return m.active_params - m.experts_per_token * expert(m)


BYTE_ROWS = [
    # Llama-3.1-70B decode, 1 request of 8,192: the active weights (BF16; not the embedding
    # table, a lookup), KV of 8,192 tokens read and 1 written in 80 layers, one hidden state
    # a layer.
    (LLAMA_70B, ([], 1, 8192), 1, 69_503_033_344 * 2 + 8193 * 80 * 4096 + 80 * 8192 * 2),
    # The same at TP 8: every byte divides by 8 (8 KV heads), so the sum is the same.
    (LLAMA_70B, ([], 1, 8192), 8, 69_503_033_344 * 2 + 8193 * 80 * 4096 + 80 * 8192 * 2),
    # Qwen3.5-35B-A3B at TP 4: 2 KV heads, so each GPU holds half the KV (replicated), and
    # 4 GPUs move 2 x the KV bytes. One decode touches 8 of 256 experts a layer; neither the
    # MTP layer nor the vision encoder is read.
    (
        QWEN35_35B,
        ([], 1, 8192),
        4,
        (1_939_796_608 + 8 * expert(QWEN35_35B)) * 2
        + 2 * 8193 * 10 * 2048
        + 40 * 2048 * 2
        + 2 * 30 * 2_146_304,
    ),
    # Qwen3-30B-A3B, 128 decodes: 128 x (1 - (120/128)^128) experts of 128 touched a layer.
    (
        QWEN3_30B,
        ([], 128, 128 * 8192),
        1,
        (1_229_928_448 + 128 * (1 - (120 / 128) ** 128) * expert(QWEN3_30B)) * 2
        + 128 * 8193 * 48 * 2048
        + 128 * 48 * 2048 * 2,
    ),
    # gpt-oss-120b, a chunk of 512 after 4,096 cached: full layers read 4,096 cached tokens,
    # windowed ones 128; all 36 write 512.
    (
        GPT_OSS_120B,
        [(512, 4096)],
        1,
        (shared(GPT_OSS_120B) + 128 * (1 - (124 / 128) ** 512) * expert(GPT_OSS_120B)) * 0.5585
        + (18 * 4096 + 18 * 128 + 36 * 512) * 2048
        + 512 * 36 * 2880 * 2,
    ),
]


def test_the_shared_weights_by_hand():
    assert shared(QWEN35_35B) == 1_939_796_608  # 2,946,429,568 - 8 x 40 x 3 x 2048 x 512
    assert shared(QWEN3_30B) == 1_229_928_448  # 3,041,867,776 - 8 x 48 x 3 x 2048 x 768


@pytest.mark.parametrize(("model", "step", "tp", "expected"), BYTE_ROWS)
def test_bytes_of_a_step(model, step, tp, expected):
    prefill, decodes, context = (step, 0, 0) if isinstance(step, list) else step
    assert bytes_moved(model, prefill, decodes, context, tp) == pytest.approx(expected, rel=1e-12)


# ------------------------------------------------------------------------------------------
# Steps on real GPUs with the default efficiency, from the dominant terms (within 1 %)

H100_PREFILL = 989.5e12 * 0.45  # FLOP/s at BLIS's prefill MFU
H100_BYTES = 3.35e12 * 0.7  # B/s at 0.7 of peak
H200_BYTES = 4.8e12 * 0.7
NVLINK = 450e9 * 0.7


def overheads(m: ModelFigures, requests: int) -> float:
    return 126e-6 + m.num_layers * 32e-6 + requests * 4e-6


STEP_ROWS = [
    # Llama-3.1-70B, 8,192-token prefill on one H100: compute-bound, 1.21e15 FLOPs.
    (
        LLAMA_70B,
        H100,
        1,
        [(8192, 0)],
        (2 * 68.452e9 * 8192 + 80 * 4 * 64 * 128 * 8192 * 4096.5) / H100_PREFILL
        + overheads(LLAMA_70B, 1),
    ),
    # The same on 4 H100: a quarter of the FLOPs each, plus 160 all-reduces of 8192 x 8192 x
    # 2 B, of which a ring moves 2 x 3/4 a GPU.
    (
        LLAMA_70B,
        H100,
        4,
        [(8192, 0)],
        (2 * 68.452e9 * 8192 + 80 * 4 * 64 * 128 * 8192 * 4096.5) / H100_PREFILL / 4
        + 160 * 8192 * 8192 * 2 * 1.5 / NVLINK
        + overheads(LLAMA_70B, 1),
    ),
    # Llama-3.1-70B decode, batch 1 at 8,192: memory-bound, the weights (139 GB) dominate.
    (
        LLAMA_70B,
        H100,
        1,
        ([], 1, 8192),
        (69.503e9 * 2 + 8192 * 80 * 4096) / H100_BYTES + overheads(LLAMA_70B, 1),
    ),
    # Qwen3.5-35B-A3B decode, 128 requests at 12,288 (AIConfigurator's 28.1 ms point) on one
    # H200: 251.6 of 256 experts a layer, 32 GB of KV, 16.5 GB of GDN state read and written.
    (
        QWEN35_35B,
        H200,
        1,
        ([], 128, 128 * 12288),
        (
            (1.940e9 + 256 * (1 - (248 / 256) ** 128) / 256 * 32.212e9) * 2
            + 128 * 12288 * 10 * 2048
            + 128 * 2 * 30 * 2_146_304
        )
        / H200_BYTES
        + overheads(QWEN35_35B, 128),
    ),
    # Qwen3-30B-A3B, 8,192-token prefill on one H100: compute-bound.
    (
        QWEN3_30B,
        H100,
        1,
        [(8192, 0)],
        (2 * 2.7307e9 * 8192 + 48 * 4 * 32 * 128 * 8192 * 4096.5) / H100_PREFILL
        + overheads(QWEN3_30B, 1),
    ),
]


@pytest.mark.parametrize(("model", "gpu", "tp", "step", "expected"), STEP_ROWS)
def test_step_time_on_a_gpu(model, gpu, tp, step, expected):
    prefill, decodes, context = (step, 0, 0) if isinstance(step, list) else step
    got = RooflineStep(model, gpu, tp).step_s(prefill, decodes, context)
    assert got == pytest.approx(expected, rel=0.01)


def test_fp8_weights_compute_at_the_fp8_rate_where_the_gpu_has_it():
    fp8 = dataclasses.replace(LLAMA_70B, weight_bytes_per_param=1)
    step = ([(8192, 0)], 0, 0)
    bf16_s = RooflineStep(LLAMA_70B, H100, 4).step_s(*step)
    fp8_s = RooflineStep(fp8, H100, 4).step_s(*step)
    assert 0.45 < fp8_s / bf16_s < 0.6  # compute halves; all-reduce and overheads stay
    assert RooflineStep(fp8, H100, 4).describe().endswith("FP8")
    assert RooflineStep(fp8, A100, 4).describe().endswith("BF16")  # no FP8 on an A100
    # FP8 with its block scales and BF16 embeddings averages a little over a byte; MXFP4
    # experts (gpt-oss, 0.56) dequantise to BF16.
    scaled = dataclasses.replace(LLAMA_70B, weight_bytes_per_param=1.03)
    assert RooflineStep(scaled, H100, 4).describe().endswith("FP8")
    assert RooflineStep(GPT_OSS_120B, H100, 1).describe().endswith("BF16")


def test_step_figures_of_the_roofline():
    model = RooflineStep(QWEN35_35B, H200, 1, name="qwen3.5-35b-a3b")
    got = step_figures(model)
    assert list(got) == ["prefill_ms", "decode_ms"]
    assert list(got["prefill_ms"]) == ["1024", "8192", "32768"]
    assert list(got["decode_ms"]) == ["1", "32", "128"]
    assert got["prefill_ms"]["8192"] == model.step_s([(8192, 0)], 0, 0) * 1e3
    assert got["decode_ms"]["32"] == model.step_s([], 32, 32 * 8192) * 1e3
    # AIConfigurator 0.12.0 (H200, vLLM, TP1) gives 112.9 ms for 8,192 tokens: within 25 %.
    assert got["prefill_ms"]["8192"] == pytest.approx(112.9, rel=0.25)
    assert model.describe() == "roofline: qwen3.5-35b-a3b on 1 x H200, BF16"


def test_describe_names_the_architecture_without_a_name():
    assert RooflineStep(GPT_OSS_120B, B200, 2).describe() == (
        "roofline: GptOssForCausalLM on 2 x B200, BF16"
    )


def test_an_empty_step_takes_no_time():
    assert RooflineStep(LLAMA_70B, H100, 1).step_s([], 0, 0) == 0.0


def test_the_default_efficiency_is_blis_per_gpu():
    assert default_efficiency(H100) is DEFAULT_EFFICIENCY
    assert default_efficiency(H200) is DEFAULT_EFFICIENCY
    assert (default_efficiency(A100).mfu_prefill, default_efficiency(A100).mfu_decode) == (
        0.38,
        0.18,
    )
    assert (default_efficiency(L40S).mfu_prefill, default_efficiency(L40S).mfu_decode) == (
        0.32,
        0.08,
    )
    assert DEFAULT_EFFICIENCY.as_dict() == {
        "mfu_prefill": 0.45,
        "mfu_decode": 0.30,
        "bandwidth": 0.7,
        "interconnect": 0.7,
        "step_us": 126.0,
        "layer_us": 32.0,
        "request_us": 4.0,
    }


def test_overheads_are_per_step_layer_and_request():
    lean = Efficiency(step_us=0.0, layer_us=0.0, request_us=0.0)
    step = ([(100, 0), (50, 10)], 3, 3000)
    full = RooflineStep(QWEN3_30B, H100, 1).step_s(*step)
    bare = RooflineStep(QWEN3_30B, H100, 1, lean).step_s(*step)
    assert full - bare == pytest.approx((126 + 48 * 32 + 5 * 4) * 1e-6, rel=1e-9)


# ------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("tp", [0, -1, 1.5, True])
def test_tensor_parallel_must_be_a_positive_integer(tp):
    with pytest.raises(ConfigError) as err:
        RooflineStep(LLAMA_70B, H100, tp)
    assert str(err.value) == f"--tensor-parallel {tp!r}: expected an integer >= 1"


def test_a_gpu_known_by_its_memory_alone_has_no_roofline():
    with pytest.raises(ConfigError) as err:
        RooflineStep(LLAMA_70B, gpu_memory(None, 96), 1)
    assert str(err.value) == (
        "the step-time roofline needs a GPU's peaks; 96 GiB GPU has none "
        "(--gpu H100, H200, B200, MI300X, A100, L40S)"
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mfu_prefill": 0.0}, "step efficiency mfu_prefill 0.0: expected 0 < x <= 1"),
        ({"bandwidth": 1.5}, "step efficiency bandwidth 1.5: expected 0 < x <= 1"),
        ({"mfu_decode": float("nan")}, "step efficiency mfu_decode nan: expected 0 < x <= 1"),
        ({"layer_us": -1.0}, "step overhead layer_us -1.0: expected a finite x >= 0"),
        ({"step_us": float("inf")}, "step overhead step_us inf: expected a finite x >= 0"),
    ],
)
def test_efficiency_out_of_range(values, message):
    with pytest.raises(ConfigError) as err:
        Efficiency(**values)
    assert str(err.value) == message


# ------------------------------------------------------------------------------------------
# Properties: more work is never faster; more GPUs never slower (over NVLink-class links)

CHUNKS = st.lists(st.tuples(st.integers(1, 16384), st.integers(0, 131072)), max_size=6)
STEPS = st.tuples(CHUNKS, st.integers(0, 256), st.integers(0, 4096))  # context per decode
MODEL = st.sampled_from(MODELS)
LINKED = st.sampled_from([GPUS[n] for n in ("h100", "h200", "b200", "mi300x", "a100")])


def run(model: RooflineStep, step) -> float:
    chunks, decodes, context_each = step
    return model.step_s(chunks, decodes, decodes * context_each)


@settings(max_examples=300, deadline=None)
@given(m=MODEL, gpu=LINKED, tp=st.sampled_from([1, 2, 4, 8]), step=STEPS, data=st.data())
def test_more_work_is_never_faster(m, gpu, tp, step, data):
    model = RooflineStep(m, gpu, tp)
    chunks, decodes, context_each = step
    base = run(model, step)
    more = [
        (chunks + [(data.draw(st.integers(1, 4096)), 0)], decodes, context_each),
        (chunks, decodes + 1, context_each),
        (chunks, decodes, context_each + data.draw(st.integers(1, 4096))),
    ]
    if chunks:
        (n, p), rest = chunks[0], chunks[1:]
        extra = data.draw(st.integers(1, 4096))
        more.append(([(n + extra, p)] + rest, decodes, context_each))  # more new tokens
        more.append(([(n, p + extra)] + rest, decodes, context_each))  # a longer history
    for bigger in more:
        assert run(model, bigger) >= base


@settings(max_examples=300, deadline=None)
@given(m=MODEL, gpu=LINKED, step=STEPS)
def test_more_tensor_parallel_is_never_slower(m, gpu, step):
    times = [run(RooflineStep(m, gpu, tp), step) for tp in (1, 2, 4, 8)]
    assert times == sorted(times, reverse=True)
