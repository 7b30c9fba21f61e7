"""`hpa model show` (issue 44 item 1): a preset or a Hugging Face config.json as hpa reads
it, as a table and as one JSON object; the errors of a file it cannot read, in one line."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.config.hf_read import ARCHITECTURES

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf_configs"


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_show_a_preset_as_a_table():
    done = run("model", "show", "qwen3-next-80b-a3b")
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0].startswith("model qwen3-next-80b-a3b (preset): Qwen3-Next-80B-A3B")
    for expected in (
        "groups (KV-cache groups)      full_attention x1, mamba x3",
        "block size                    544 tokens",
        "bytes per block               13,369,344 B (12.75 MiB)",
        "bytes per state               40,108,032 B (38.25 MiB)",
        "KV bytes per token per layer  2,048 B (2.00 KiB)",
        "layers                        48: 12 full attention, 36 recurrent (Mamba / GDN)",
    ):
        assert expected in lines


def test_show_a_config_json_as_json():
    path = FIXTURES / "gpt-oss-120b.json"
    done = run("model", "show", path, "--format", "json")
    assert done.exit_code == 0, done.output
    shown = json.loads(done.stdout)  # one object
    assert (shown["model"], shown["kind"], shown["block_size"]) == (str(path), "file", 16)
    assert shown["num_groups"] == {"full_attention": 1, "sliding_window": 1}
    assert shown["sliding_window"] == 128
    assert shown["figures"]["total_params"] == 116829156672
    assert shown["figures"]["active_params"] == 5132849472


def test_show_errors_are_one_line(tmp_path):
    missing = tmp_path / "missing.json"
    done = run("model", "show", missing)
    assert done.exit_code == 2
    assert done.stderr == f"Error: model file {missing}: cannot read (No such file or directory)\n"
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    done = run("model", "show", bad)
    assert done.exit_code == 2
    assert done.stderr == (
        f"Error: model file {bad}: not JSON (Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1))\n"
    )
    unknown = tmp_path / "config.json"
    unknown.write_text(json.dumps({"architectures": ["RwkvForCausalLM"], "model_type": "rwkv"}))
    done = run("model", "show", unknown)
    assert done.exit_code == 2
    assert done.stderr == (
        f"Error: model file {unknown}: cannot read field 'architectures' (architectures[0] "
        f"'RwkvForCausalLM' is not an architecture hpa knows; known: "
        f"{', '.join(sorted(ARCHITECTURES))})\n"
    )
    done = run("model", "show", "gpt-9")
    assert done.exit_code == 2
    assert done.stderr.startswith("Error: unknown model preset 'gpt-9'; known: nemotron-nano-9b-v2")


def test_a_folder_without_config_json_or_a_file_not_json_is_named_as_such(tmp_path):
    """(both were 'unknown model preset ...', as if a path were a preset's name)"""
    (tmp_path / "model").mkdir()
    (tmp_path / "config.yaml").write_text("architectures: []")
    for given, why in (
        (tmp_path / "model", f"model folder {tmp_path / 'model'}: no config.json in it (a "
         "model folder is read for its Hugging Face config.json)"),
        (tmp_path / "config.yaml", f"model file {tmp_path / 'config.yaml'}: not a .json file "
         "(a model file is a preset's layout or a Hugging Face config.json)"),
    ):  # fmt: skip
        done = run("model", "show", given)
        assert (done.exit_code, done.stderr) == (2, f"Error: {why}\n")


def test_show_with_a_gpu_prints_the_step_model():
    config = "tests/fixtures/hf_configs/qwen3.5-35b-a3b.json"
    out = CliRunner().invoke(cli, ["model", "show", config, "--gpu", "H200", "--format", "json"])
    assert out.exit_code == 0, out.output
    step = json.loads(out.output)["step"]
    assert step["step_model"] == "roofline: qwen3.5-35b-a3b on 1 x H200, BF16"
    assert list(step["prefill_ms"]) == ["1024", "8192", "32768"]
    assert list(step["decode_ms"]) == ["1", "32", "128"]
    two = CliRunner().invoke(
        cli,
        ["model", "show", config, "--gpu", "h200", "--tensor-parallel", "2", "--format", "json"],
    )
    faster = json.loads(two.output)["step"]
    assert all(faster["prefill_ms"][k] < step["prefill_ms"][k] for k in step["prefill_ms"])
    bad = CliRunner().invoke(cli, ["model", "show", config, "--gpu", "V100"])
    assert bad.exit_code == 2  # a usage error, as the CLI reports every ConfigError
    assert bad.output == (
        "Error: --gpu 'V100': unknown GPU; known: H100, H200, B200, MI300X, A100, L40S\n"
    )
