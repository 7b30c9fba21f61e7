"""A model from its Hugging Face config.json (issue 44 item 1): every figure hpa derives, for
the real configs under tests/fixtures/hf_configs/ (README.md there says where each comes from),
against the arithmetic written beside it (vLLM 0.33's rules, analyzer/config/hf_config.py's
docstring) or a model card; and the four presets reproduced from their models' configs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analyzer.config.hf_config import derive_model, hybrid_block_size, kv_group_size
from analyzer.config.hf_read import ARCHITECTURES
from analyzer.config.model_figures import ModelFigures
from analyzer.config.models import load_model
from analyzer.errors import ConfigError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"


def _derive(name: str, **options) -> dict:
    path = FIXTURES / f"{name}.json"
    return derive_model(path, json.loads(path.read_text()), **options)


# name: (block_size, num_groups, layers_per_group, KV bytes per token per layer,
#        state bytes per layer, bytes_per_block, bytes_per_state, sliding window)
GEOMETRY = {
    # 12 FA + 36 GDN. KV 2 heads x (256+256) x 2 B = 2,048; state 32x128x128x2 B (BF16: no
    # mamba_ssm_dtype) + (16x128x2 + 32x128) x 3 x 2 B = 1,097,728; 16 x cdiv(1,097,728,
    # 16 x 2,048) = 544; group size 12: 1 + 36/12 = 3; 12 x 544 x 2,048; 3 x that.
    "qwen3-next-80b-a3b-thinking": (544, {"full_attention": 1, "mamba": 3}, 12, 2048,
                                    1097728, 13369344, 40108032, None),
    # 10 FA + 30 GDN. KV 2 x 512 x 2 = 2,048; state 32x128x128x4 B (mamba_ssm_dtype float32)
    # + 8,192 x 3 x 2 B = 2,146,304; 16 x cdiv(2,146,304, 32,768) = 16 x 66 = 1,056;
    # 10 x 1,056 x 2,048 = 21,626,880; 3 x that.
    "qwen3.5-35b-a3b": (1056, {"full_attention": 1, "mamba": 3}, 10, 2048, 2146304,
                        21626880, 64880640, None),
    # 16 FA + 48 GDN. KV 4 x 512 x 2 = 4,096; state 48x128x128x4 + (4,096 + 6,144) x 3 x 2
    # = 3,207,168; 16 x cdiv(3,207,168, 65,536) = 784; 16 x 784 x 4,096; 3 x that.
    "qwen3.5-27b": (784, {"full_attention": 1, "mamba": 3}, 16, 4096, 3207168, 51380224,
                    154140672, None),
    # 8 FA + 24 GDN. state 32x128x128x4 + 8,192 x 6 = 2,146,304; 16 x cdiv(., 65,536) = 528.
    "qwen3.5-4b": (528, {"full_attention": 1, "mamba": 3}, 8, 4096, 2146304, 17301504,
                   51904512, None),
    # 4 attention + 27 Mamba2. No mamba_ssm_cache_dtype in the config: float32 since vLLM PR
    # #39032. SSM 128x80x128x4 = 5,242,880 + conv (10,240 + 2x8x128) x 3 x 2 = 73,728;
    # 16 x cdiv(5,316,608, 16 x 4,096) = 16 x 82 = 1,312; 4 x 1,312 x 4,096; 7 x that.
    "nvidia-nemotron-nano-9b-v2": (1312, {"full_attention": 1, "mamba": 7}, 4, 4096,
                                   5316608, 21495808, 150470656, None),
    # 10 attention + 54 Mamba2 (118-char pattern). SSM 256x64x256x4 = 16,777,216 + conv
    # (16,384 + 2x8x256) x 3 x 2 = 122,880; 16 x cdiv(16,900,096, 65,536) = 16 x 258 = 4,128;
    # group size 10: 1 + cdiv(54, 10) = 6.
    "nemotron-h-56b-base-8k": (4128, {"full_attention": 1, "mamba": 6}, 10, 4096,
                               16900096, 169082880, 1014497280, None),
    # 6 attention + 23 Mamba2 (+ 23 MoE layers). KV 2 x 2 x 128 x 2 = 1,024; SSM float32 (the
    # config says so) 64x64x128x4 = 2,097,152 + (4,096 + 2,048) x 3 x 2 = 36,864;
    # 16 x cdiv(2,134,016, 16,384) = 16 x 131 = 2,096; group 6: 1 + cdiv(23, 6) = 4.
    "nemotron-3-nano-30b-a3b": (2096, {"full_attention": 1, "mamba": 4}, 6, 1024, 2134016,
                                12877824, 51511296, None),
    # 4 attention + 36 Mamba2. KV 2 x 4 x 128 x 2 = 2,048; SSM 48x64x128x2 = 786,432 + conv
    # (3,072 + 256) x 3 x 2 = 19,968; 16 x cdiv(806,400, 32,768) = 400; 1 + 36/4 = 9.
    "granite-4.0-h-tiny": (400, {"full_attention": 1, "mamba": 9}, 4, 2048, 806400, 3276800,
                           29491200, None),
    # attention at i % 8 == 4 (4 layers), 28 Mamba1. d_inner 2 x 4,096 = 8,192: conv 8,192 x 3
    # x 2 = 49,152, SSM 8,192 x 16 x 2 = 262,144; 16 x cdiv(311,296, 65,536) = 80; 1 + 7.
    "ai21-jamba-1.5-mini": (80, {"full_attention": 1, "mamba": 7}, 4, 4096, 311296, 1310720,
                            9175040, None),
    # every layer attention and Mamba2 side by side: 44 + 44, group size 44. KV 2 x 2 x 128 x 2
    # = 1,024; conv (3,072 + 2 x 256) x 3 x 2 = 21,504, SSM 24x128x256x2 = 1,572,864;
    # 16 x cdiv(1,594,368, 16,384) = 16 x 98 = 1,568; 44 x 1,568 x 1,024.
    "falcon-h1-7b": (1568, {"full_attention": 1, "mamba": 1}, 44, 1024, 1594368, 70647808,
                     70647808, None),
    # 18 sliding (window 128) + 18 full: group size 18, one group each; 2 x 8 x 64 x 2 = 2,048;
    # block 16 (no recurrent layer); 18 x 16 x 2,048.
    "gpt-oss-120b": (16, {"full_attention": 1, "sliding_window": 1}, 18, 2048, None, 589824,
                     None, 128),
    "gpt-oss-20b": (16, {"full_attention": 1, "sliding_window": 1}, 12, 2048, None, 393216,
                    None, 128),
    # sliding_window_pattern 6 (Gemma3TextConfig's default): 10 full (layers 5, 11, ..., 59)
    # + 52 sliding; 52 >= 1.5 x 10, so group size 10: 1 + cdiv(52, 10) = 6; 2 x 16 x 128 x 2.
    "gemma-3-27b-it": (16, {"full_attention": 1, "sliding_window": 6}, 10, 8192, None,
                       1310720, None, 1024),
    "llama-3.1-70b": (16, {"full_attention": 1}, 80, 4096, None, 5242880, None, None),
    "qwen3-30b-a3b": (16, {"full_attention": 1}, 48, 2048, None, 1572864, None, None),
    "mixtral-8x7b": (16, {"full_attention": 1}, 32, 4096, None, 2097152, None, None),
    # MLA: one latent of (512 + 64) x 2 B = 1,152 per token per layer; FlashMLA's 64-token
    # block; 61 layers in one group: 61 x 64 x 1,152.
    "deepseek-v3": (64, {"full_attention": 1}, 61, 1152, None, 4497408, None, None),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(GEOMETRY))
def test_cache_geometry_is_vllms(name):
    block, groups, per_group, kv, state, per_block, per_state, window = GEOMETRY[name]
    model = _derive(name)
    assert model["block_size"] == block
    assert model["num_groups"] == groups and model["groups"] == list(groups)
    assert model["layers_per_group"] == per_group
    assert model["kv_bytes_per_token_per_layer"] == kv
    assert model.get("mamba_state_bytes_per_layer") == state
    assert model["bytes_per_block"] == per_block
    assert model.get("bytes_per_state") == per_state
    assert model.get("sliding_window") == window
    assert model["figures"]["sliding_window"] == window


# name: (total parameters, active per token) computed by hand; see the comments.
EXACT_PARAMS = {
    # embed + head 2 x 128,256 x 8,192 = 2,101,346,304; a layer: q, o 8,192^2 each, k, v
    # 8,192 x 1,024 each, MLP 3 x 8,192 x 28,672, 2 norms of 8,192 = 855,654,400; x 80 + final
    # norm 8,192 = 70,553,706,496 (card: 70.6 B). Active: less the embedding table.
    "llama-3.1-70b": (70553706496, 70553706496 - 128256 * 8192),
    # embed + head 2 x 201,088 x 2,880 = 1,158,266,880; attention 2,880 x 4,096 x 2 + 2,880 x
    # 512 x 2 + biases 4,096 + 1,024 + 2,880 + 64 sinks = 26,550,144; experts 128 x (2,880 x
    # 5,760 + 2,880^2 + biases 5,760 + 2,880) = 3,186,155,520; router 2,880 x 128 + 128; norms
    # 2 x 2,880: 36 layers + final norm = 116,829,156,672 (card: 116.83 B). Active: head
    # 579,133,440 + 36 x (26,550,144 + 368,768 + 5,760 + 4 x 24,891,840) + 2,880
    # = 5,132,849,472 (card: 5.13 B).
    "gpt-oss-120b": (116829156672, 5132849472),
    # embed + head 2 x 151,936 x 2,048 = 622,329,856; attention 2 x 2,048 x 4,096 + 2 x 2,048 x
    # 512 + q/k norms 256 = 18,874,624; experts 128 x 3 x 2,048 x 768 = 603,979,776; router
    # 262,144; norms 4,096: x 48 + 2,048 = 30,532,122,624 (card: 30.5 B). Active: head
    # 311,164,928 + 48 x (18,874,624 + 262,144 + 4,096 + 8 x 4,718,592) + 2,048
    # = 3,041,867,776 (the card's 3.3 B counts the 311 M embedding table too).
    "qwen3-30b-a3b": (30532122624, 3041867776),
    # language model 26,895,998,464 (embed + head 2,542,796,800; 16 gated-attention layers
    # 104,858,112; 48 GDN layers 115,876,064; 64 MLPs 267,386,880; norms) + vision encoder
    # 460,730,096 (27 ViT blocks of 15,239,504, patch and position embeddings, merger) + MTP
    # layer 424,699,392 (fc 52,428,800 + an attention layer and MLP + norms) = 27,781,427,952:
    # the 27.78 B of Qwen3.6-27B's checkpoint (the preset's source), which shares these dims.
    "qwen3.5-27b": (27781427952, 25624600064),
}


@pytest.mark.parametrize("name", sorted(EXACT_PARAMS))
def test_parameters_by_hand(name):
    total, active = EXACT_PARAMS[name]
    figures = _derive(name)["figures"]
    assert (figures["total_params"], figures["active_params"]) == (total, active)


# name: (published total, its tolerance, published active or None, its tolerance, whether
# the publisher counts the input embedding table as active). hpa's active leaves the table
# out (a lookup, no matmul), so a card that counts it is compared with active + table.
CARDS = {
    "gpt-oss-20b": (20.91e9, 0.005, 3.61e9, 0.005, False),  # OpenAI's card
    "deepseek-v3": (685e9, 0.005, 37e9, 0.02, True),  # 671 B + 14 B MTP (HF: 685 B); 37 B
    "qwen3-next-80b-a3b-thinking": (81.3e9, 0.002, None, 0, False),  # HF: 81.3 B; "A3B"
    "qwen3.5-35b-a3b": (35e9, 0.03, 3e9, 0.02, False),  # 35B-A3B
    "mixtral-8x7b": (46.7e9, 0.005, 12.9e9, 0.005, True),  # Mistral: 46.7 B, 12.9 B active
    "ai21-jamba-1.5-mini": (52e9, 0.01, 12e9, 0.02, True),  # AI21: 52 B total, 12 B active
    "nemotron-h-56b-base-8k": (56e9, 0.01, None, 0, False),  # 56B
    "nvidia-nemotron-nano-9b-v2": (9e9, 0.02, None, 0, False),  # "9B" (the preset: 9e9)
    "granite-4.0-h-tiny": (7e9, 0.01, None, 0, False),  # IBM: 7 B total ("1B" active: rounded)
    "gemma-3-27b-it": (27.4e9, 0.005, None, 0, False),  # HF: 27.4 B with the SigLIP encoder
}


@pytest.mark.parametrize("name", sorted(CARDS))
def test_parameters_against_the_model_cards(name):
    total, total_tolerance, active, active_tolerance, with_table = CARDS[name]
    model = _derive(name)
    figures = model["figures"]
    assert figures["total_params"] == pytest.approx(total, rel=total_tolerance)
    table = figures["vocab_size"] * figures["hidden_size"] if with_table else 0
    if active is not None:
        assert figures["active_params"] + table == pytest.approx(active, rel=active_tolerance)


def test_a_dense_models_active_parameters_are_all_but_the_table_mtp_and_vision():
    for name in ("nemotron-h-56b-base-8k", "nvidia-nemotron-nano-9b-v2", "gemma-3-27b-it"):
        f = _derive(name)["figures"]
        table = f["vocab_size"] * f["hidden_size"]
        tied = table if name == "gemma-3-27b-it" else 0  # Gemma's head is its table
        assert f["active_params"] == f["total_params"] - table - f["vision_params"] + tied


def test_weights_bytes_follow_the_checkpoints_dtypes():
    # gpt-oss: MXFP4 experts, 17/32 B a parameter (4 bits + an 8-bit scale per 32), the rest
    # BF16: 36 x 128 x 24,883,200 expert weights x 17/32 + the other 2,167,371,072 x 2 B
    # = 65,248,815,744 (the checkpoint: about 65 GB).
    assert _derive("gpt-oss-120b")["weights_bytes"] == 65248815744
    # DeepSeek-V3: FP8 linear layers (1 B + a float32 scale per 128 x 128 block), BF16
    # embeddings, head, norms and routers: about the 689 GB of its safetensors.
    assert _derive("deepseek-v3")["weights_bytes"] == pytest.approx(688.5e9, rel=0.002)
    assert _derive("llama-3.1-70b")["weights_bytes"] == 2 * 70553706496


def test_figures_name_the_models_shapes():
    figures = ModelFigures.from_dict(_derive("deepseek-v3")["figures"])
    assert (figures.num_kv_heads, figures.head_dim, figures.v_head_dim) == (1, 192, 128)
    assert (figures.num_dense_mlp_layers, figures.num_moe_layers) == (3, 58)
    assert (figures.num_experts, figures.experts_per_token, figures.num_shared_experts) == (
        256, 8, 1,
    )  # fmt: skip
    assert figures.mtp_params == 13463426304  # the MTP layer with its own embedding and head
    next_ = ModelFigures.from_dict(_derive("qwen3-next-80b-a3b-thinking")["figures"])
    assert (next_.num_full_attention_layers, next_.num_state_layers) == (12, 36)
    assert (next_.shared_expert_intermediate_size, next_.moe_intermediate_size) == (512, 512)
    assert next_.state_bytes_per_layer == 1097728
    assert next_.as_dict()["weights_bytes"] == next_.weights_bytes


# --- The four presets, from their models' configs ------------------------------------------

PRESETS = {
    "qwen3-next-80b-a3b": ("qwen3-next-80b-a3b-thinking", {}, 0.1e9 / 81.3e9),
    "qwen3.5-4b": ("qwen3.5-4b", {}, 0.10),  # "good to about 10%"
    # Qwen3.6-27B shares Qwen3.5-27B's config (the preset's source gives the same dims)
    "qwen3.6-27b": ("qwen3.5-27b", {}, 0.01e9 / 27.78e9),
    # the preset keeps BF16 states (vLLM 0.33 gives those with --mamba-ssm-cache-dtype
    # bfloat16; its default for NemotronH is float32: GEOMETRY above); "9B, a few % lower"
    "nemotron-nano-9b-v2": ("nvidia-nemotron-nano-9b-v2", {"mamba_ssm_cache_dtype": "bfloat16"},
                            0.05),
}  # fmt: skip
PRESET_KEYS = (
    "block_size", "groups", "num_groups", "layers_per_group", "bytes_per_block",
    "bytes_per_state", "kv_bytes_per_token_per_layer", "mamba_state_bytes_per_layer",
    "num_full_attention_layers", "num_mamba_layers", "figures",
)  # fmt: skip


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_are_their_configs(preset):
    fixture, options, precision = PRESETS[preset]
    derived, stated = _derive(fixture, **options), load_model(preset)
    assert {k: derived[k] for k in PRESET_KEYS} == {k: stated[k] for k in PRESET_KEYS}
    assert derived["weights_bytes"] == pytest.approx(stated["weights_bytes"], rel=precision)


def test_block_size_and_groups_follow_vllms_rules():
    assert hybrid_block_size(2048, 1097728) == 544
    assert hybrid_block_size(4096, 4096 * 16) == 16  # a state that fills a page exactly
    assert kv_group_size([10, 52]) == 10  # Gemma 3: the "1" of its 5:1 pattern
    assert kv_group_size([12, 13]) == 13  # gpt-oss-20b + EAGLE, vLLM's own example


# --- Reading files -------------------------------------------------------------------------


def test_load_model_reads_a_config_json_a_folder_and_a_preset_layout(tmp_path):
    folder = tmp_path / "gpt-oss-20b"
    folder.mkdir()
    shutil.copy(FIXTURES / "gpt-oss-20b.json", folder / "config.json")
    by_folder, by_file = load_model(str(folder)), load_model(str(folder / "config.json"))
    assert by_folder == by_file and by_file["name"] == "gpt-oss-20b"
    by_file["block_size"] = 0  # a copy: the cached model is not changed
    assert load_model(str(folder))["block_size"] == 16
    layout = tmp_path / "m.json"
    layout.write_text(json.dumps({"block_size": 64, "groups": ["full_attention"]}))
    assert load_model(str(layout)) == {
        "block_size": 64,
        "groups": ["full_attention"],
        "num_groups": {"full_attention": 1},  # one KV-cache group a type when not given
    }


def _write(tmp_path, data) -> Path:
    path = tmp_path / "config.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_an_unknown_architecture_is_one_line_naming_the_field(tmp_path):
    path = _write(tmp_path, {"architectures": ["FooForCausalLM"], "model_type": "foo"})
    with pytest.raises(ConfigError) as err:
        load_model(str(path))
    assert str(err.value) == (
        f"model file {path}: cannot read field 'architectures' (architectures[0] "
        f"'FooForCausalLM' is not an architecture hpa knows; known: "
        f"{', '.join(sorted(ARCHITECTURES))})"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": None}, "cannot read field 'hidden_size' (missing)"),
        ({"num_key_value_heads": "8"}, "cannot read field 'num_key_value_heads' "
         "(expected int, got '8')"),
        ({"quantization_config": {"quant_method": "awq"}}, "cannot read field "
         "'quantization_config.quant_method' ('awq' is not a quantization hpa knows (mxfp4, fp8))"),
        ({"layer_types": ["full_attention"]}, "cannot read field 'layer_types' (expected a "
         "list of 80 layer types)"),
    ],
)  # fmt: skip
def test_a_field_hpa_cannot_read_is_named(tmp_path, change, message):
    config = {**json.loads((FIXTURES / "llama-3.1-70b.json").read_text()), **change}
    path = _write(tmp_path, {k: v for k, v in config.items() if v is not None})
    with pytest.raises(ConfigError) as err:
        load_model(str(path))
    assert str(err.value) == f"model file {path}: {message}"


def test_a_text_config_field_is_named_with_its_prefix(tmp_path):
    config = json.loads((FIXTURES / "qwen3.5-4b.json").read_text())
    del config["text_config"]["linear_num_value_heads"]
    path = _write(tmp_path, config)
    with pytest.raises(ConfigError, match=r"field 'text_config.linear_num_value_heads' \(missing"):
        load_model(str(path))


def test_missing_and_unparsable_files(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_model(str(tmp_path / "none.json"))
    assert str(err.value) == (
        f"model file {tmp_path / 'none.json'}: cannot read (No such file or directory)"
    )
    path = _write(tmp_path, "{not json")
    with pytest.raises(ConfigError) as err:
        load_model(str(path))
    assert str(err.value).startswith(f"model file {path}: not JSON (Expecting property name")


def test_a_policy_takes_its_block_size_from_a_config_json():
    from analyzer.config.policy import build_policy

    path = str(FIXTURES / "qwen3-next-80b-a3b-thinking.json")
    policy = build_policy({"model": path, "groups": ["full_attention", "mamba"]})
    assert policy.block_size == 544 and policy.model == path
