"""The accelerator table and the GPU arithmetic (`analyzer.config.hardware`): a replica's
weights and cache pool over tensor-parallel GPUs at vLLM's 0.9 memory utilization, the
smallest power of two that holds them, and the model presets' weights' bytes."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.config.hardware import (
    GPU_NAMES,
    GPUS,
    MAX_TENSOR_PARALLEL,
    Gpu,
    GpuPlan,
    batch_defaults,
    gpu_memory,
    gpu_plan,
    model_weights_bytes,
)
from analyzer.config.models import load_model, model_names
from analyzer.errors import ConfigError
from analyzer.sim.dispatch import make_policy, policy_values

G = 2**30
H100, H200, B200, MI300X = (GPUS[n] for n in ("h100", "h200", "b200", "mi300x"))
GPU100 = gpu_memory(None, 100)  # 90 GiB usable

# (cache bytes, weights bytes, num_caches, gpu, tensor_parallel) ->
# (tensor parallel, total GPUs, fits). H100: 72 GiB usable; H200 126.9; B200 172.8.
ROWS = [
    ((10 * G, 20 * G, 2, H100, None), (1, 2, True)),
    ((100 * G, 60 * G, 3, H100, None), (4, 12, True)),  # 160 GiB > 2 x 72
    ((100 * G, 60 * G, 3, H100, 2), (2, 6, False)),
    ((100 * G, 60 * G, 1, H100, 3), (3, 3, True)),  # any explicit N, not only powers of two
    ((1 * G, 162_600_000_000, 1, H200, None), (2, 2, True)),  # 151.4 GiB of weights
    ((1 * G, 162_600_000_000, 1, H100, 1), (1, 1, False)),
    ((44 * G, 100 * G, 1, H100, None), (2, 2, True)),  # exactly 2 x 72 GiB: fits
    ((170 * G, 10 * G, 5, GPU100, None), (2, 10, True)),
    ((300 * G, 55_560_000_000, 4, B200, None), (4, 16, True)),  # 351.7 GiB > 2 x 172.8
    ((300 * G, 55_560_000_000, 1, MI300X, 4), (4, 4, True)),
    ((64 * 72 * G, 1, 2, H100, None), (64, 128, False)),  # one byte over 64 GPUs
    ((0, 64 * 72 * G, 1, H100, None), (64, 64, False)),  # weights leave no KV space at 64
]


@pytest.mark.parametrize(("args", "expected"), ROWS)
def test_gpu_plan_table(args, expected):
    cache, weights, num_caches, gpu, tp = args
    plan = gpu_plan(
        cache_bytes=cache, weights_bytes=weights, num_caches=num_caches, gpu=gpu, tensor_parallel=tp
    )
    assert (plan.tensor_parallel, plan.total_gpus, plan.fits) == expected
    assert plan.gpus_per_replica == plan.tensor_parallel and plan.num_caches == num_caches
    assert plan.gpu == gpu.name and plan.hbm_gib == gpu.hbm_gib
    assert (plan.message is None) == plan.fits


def test_gpu_plan_fields_are_exact():
    plan = gpu_plan(
        cache_bytes=100 * G, weights_bytes=60 * G, num_caches=3, gpu=H100, tensor_parallel=4
    )
    assert plan.usable_per_gpu_gib == 72.0 and plan.weights_per_gpu_gib == 15.0
    assert plan.kv_cache_per_gpu_gib == 25.0 and plan.kv_space_per_gpu_gib == 57.0
    assert plan.cache_gib == 100.0 and plan.weights_gib == 60.0
    assert plan.pool_blocks_fit is None and plan.gpu_memory_utilization == 0.9
    assert "activation workspace" in plan.note and "not modelled" in plan.note


def test_as_dict_is_json_with_every_field_unrounded():
    plan = gpu_plan(
        cache_bytes=10**11, weights_bytes=3 * 10**10, num_caches=2, gpu=H100, tensor_parallel=None
    )
    doc = json.loads(json.dumps(plan.as_dict()))
    assert list(doc) == [f.name for f in dataclasses.fields(GpuPlan)]
    assert doc["kv_cache_per_gpu_gib"] == 10**11 / 2 / G  # not rounded for display


@pytest.mark.parametrize(
    ("tp", "per_block", "blocks"),
    [(1, G, 52), (2, G, 124), (2, 3 * G, 41), (None, 13_369_344, 4176)],
)
def test_pool_blocks_fit(tp, per_block, blocks):
    # 20 GiB of weights on H100s: 52 GiB of KV space at TP 1, 2 x 62 GiB at TP 2.
    plan = gpu_plan(
        cache_bytes=10 * G,
        weights_bytes=20 * G,
        num_caches=1,
        gpu=H100,
        tensor_parallel=tp,
        bytes_per_block=per_block,
    )
    assert (
        plan.pool_blocks_fit
        == blocks
        == math.floor(plan.tensor_parallel * plan.kv_space_per_gpu_gib * G / per_block)
    )


MESSAGES = [
    (
        (100 * G, 60 * G, H100, 2),
        "a replica's 100.0 GiB cache does not fit 2 x H100 (KV space 42.0 GiB per GPU); "
        "--tensor-parallel 4 would hold the replica",
    ),
    (
        (1 * G, 162_600_000_000, H100, 2),
        "the weights alone (75.7 GiB per GPU at TP 2) exceed 0.9 x 80 GiB per H100; "
        "--tensor-parallel 4 would hold the replica",
    ),
    (
        (64 * 72 * G, 1, H100, None),
        "a replica's 4,608.0 GiB cache does not fit 64 x H100 (KV space 72.0 GiB per GPU); "
        "no tensor parallel up to 64 holds the replica",
    ),
    (
        (0, 64 * 90 * G, GPU100, None),
        "the weights alone (90.0 GiB per GPU at TP 64) exceed 0.9 x 100 GiB per 100 GiB GPU; "
        "no tensor parallel up to 64 holds the replica",
    ),
]


@pytest.mark.parametrize(("args", "message"), MESSAGES)
def test_not_fitting_says_why_in_one_line(args, message):
    cache, weights, gpu, tp = args
    plan = gpu_plan(
        cache_bytes=cache, weights_bytes=weights, num_caches=1, gpu=gpu, tensor_parallel=tp
    )
    assert not plan.fits and plan.message == message


@pytest.mark.parametrize(
    "name", ["h100", "H100", "H200", "b200", "Mi300X", "MI300X", "a100", "L40s"]
)
def test_gpu_names_are_case_insensitive(name):
    assert gpu_memory(name, None) is GPUS[name.lower()]


def test_the_table():
    assert GPU_NAMES == ("H100", "H200", "B200", "MI300X", "A100", "L40S")
    # name: (HBM GiB, BF16 and FP8 dense TFLOP/s, HBM TB/s, interconnect GB/s each way)
    assert {
        g.name: (g.hbm_gib, g.bf16_tflops, g.fp8_tflops, g.hbm_tb_s, g.interconnect_gb_s)
        for g in GPUS.values()
    } == {
        "H100": (80.0, 989.5, 1979.0, 3.35, 450.0),
        "H200": (141.0, 989.5, 1979.0, 4.8, 450.0),
        "B200": (192.0, 2250.0, 4500.0, 8.0, 900.0),
        "MI300X": (192.0, 1307.4, 2614.9, 5.3, 448.0),
        "A100": (80.0, 312.0, None, 2.039, 300.0),
        "L40S": (48.0, 362.05, 733.0, 0.864, 32.0),
    }
    assert all(g.has_peaks for g in GPUS.values())


def test_a_gpu_by_memory_has_no_peaks():
    gpu = gpu_memory(None, 96)
    assert not gpu.has_peaks and gpu.bf16_tflops is None and gpu.hbm_tb_s is None


def test_any_other_accelerator_by_memory():
    assert gpu_memory(None, 48) == Gpu("48 GiB GPU", 48.0)
    assert gpu_memory(None, 95.5) == Gpu("95.5 GiB GPU", 95.5)


GPU_ERRORS = [
    (
        ("v100", None),
        "--gpu 'v100': unknown GPU; known: H100, H200, B200, MI300X, A100, L40S "
        "(or --gpu-memory-gib X for another)",
    ),
    (("h100", 80.0), "give --gpu NAME or --gpu-memory-gib X, not both"),
    (
        (None, None),
        "give --gpu NAME (H100, H200, B200, MI300X, A100, L40S) or --gpu-memory-gib X for "
        "another GPU",
    ),
    ((None, 0), "--gpu-memory-gib 0: expected a positive number of GiB"),
    ((None, -8.0), "--gpu-memory-gib -8.0: expected a positive number of GiB"),
    ((None, math.nan), "--gpu-memory-gib nan: expected a positive number of GiB"),
    ((None, math.inf), "--gpu-memory-gib inf: expected a positive number of GiB"),
    ((None, True), "--gpu-memory-gib True: expected a positive number of GiB"),
]


@pytest.mark.parametrize(("args", "message"), GPU_ERRORS)
def test_gpu_errors(args, message):
    with pytest.raises(ConfigError) as err:
        gpu_memory(*args)
    assert str(err.value) == message


@pytest.mark.parametrize("tp", [0, -2, 1.5])
def test_tensor_parallel_must_be_a_positive_integer(tp):
    with pytest.raises(ConfigError) as err:
        gpu_plan(cache_bytes=1, weights_bytes=1, num_caches=1, gpu=H100, tensor_parallel=tp)
    assert str(err.value) == f"--tensor-parallel {tp!r}: expected an integer >= 1"


@pytest.mark.parametrize("name", model_names())
def test_model_presets_carry_their_weights(name):
    preset = load_model(name)
    weights = preset["weights_bytes"]
    # BF16: two bytes a parameter, so an even count; every preset is 1-200 B parameters.
    assert type(weights) is int and weights % 2 == 0 and 10**9 < weights // 2 < 2 * 10**11
    assert "Weights: " in preset["source"] and "parameters" in preset["source"]
    assert model_weights_bytes(name) == weights


def test_model_weights_bytes_without_a_model_or_a_figure(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"block_size": 16, "groups": ["full_attention"]}))
    assert model_weights_bytes(None) is None and model_weights_bytes(str(path)) is None
    path.write_text(
        json.dumps({"block_size": 16, "groups": ["full_attention"], "weights_bytes": 7})
    )
    assert model_weights_bytes(str(path)) == 7


@pytest.mark.parametrize("bad", [0, -5, 1.5, "80GB", True, [1]])
def test_a_model_file_with_bad_weights_bytes(tmp_path: Path, bad):
    path = tmp_path / "m.json"
    path.write_text(
        json.dumps({"block_size": 16, "groups": ["full_attention"], "weights_bytes": bad})
    )
    with pytest.raises(ConfigError) as err:
        load_model(str(path))
    assert str(err.value) == f"model file {path}: 'weights_bytes' must be an integer >= 1"


GPU_STRATEGY = st.one_of(
    st.sampled_from(list(GPUS.values())),
    st.floats(1.0, 1000.0).map(lambda gib: gpu_memory(None, gib)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cache=st.integers(0, 10**13),
    weights=st.integers(0, 10**13),
    num_caches=st.integers(1, 64),
    gpu=GPU_STRATEGY,
)
def test_the_chosen_tensor_parallel_is_the_smallest_power_of_two_that_fits(
    cache, weights, num_caches, gpu
):
    def plan(tp):
        return gpu_plan(
            cache_bytes=cache,
            weights_bytes=weights,
            num_caches=num_caches,
            gpu=gpu,
            tensor_parallel=tp,
        )

    chosen = plan(None)
    tp = chosen.tensor_parallel
    assert tp & (tp - 1) == 0 and 1 <= tp <= MAX_TENSOR_PARALLEL
    assert chosen.total_gpus == num_caches * tp and chosen.gpus_per_replica == tp
    assert plan(tp) == chosen  # the same plan as asking for that N
    if chosen.fits:
        assert tp == 1 or not plan(tp // 2).fits
        assert chosen.kv_cache_per_gpu_gib <= chosen.kv_space_per_gpu_gib * (1 + 1e-12)
        assert chosen.message is None
    else:
        assert tp == MAX_TENSOR_PARALLEL and chosen.message
        assert not any(plan(2**k).fits for k in range(7))


@pytest.mark.parametrize(
    ("gpu", "tokens", "seqs"),
    [
        ("B200", 16384, 1024),
        ("MI300X", 16384, 1024),
        ("H100", 8192, 1024),
        ("H200", 8192, 1024),
        ("A100", 2048, 256),
        ("L40S", 2048, 256),
    ],
)
def test_batch_defaults_are_vllm_serves_on_the_gpu(gpu, tokens, seqs):
    """vLLM 0.33 EngineArgs.get_batch_defaults, OPENAI_API_SERVER (issue 46, item 2)."""
    assert batch_defaults(GPUS[gpu.lower()]) == (tokens, seqs)
    policy = make_policy(policy_values("vllm-concurrent", [f"gpu={gpu}", "model=qwen3.5-4b"]))
    assert (policy.max_num_batched_tokens, policy.max_num_seqs) == (tokens, seqs)


def test_batch_keys_given_win_over_the_gpus_defaults():
    keys = ["gpu=B200", "model=qwen3.5-4b", "max_num_seqs=64", "max_num_batched_tokens=4096"]
    policy = make_policy(policy_values("vllm-concurrent", keys))
    assert (policy.max_num_batched_tokens, policy.max_num_seqs) == (4096, 64)
    plain = make_policy(policy_values("vllm-concurrent", ["model=qwen3.5-4b"]))
    assert (plain.max_num_batched_tokens, plain.max_num_seqs) == (8192, 256)  # no GPU named
