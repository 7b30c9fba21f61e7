"""The `aic` step model (`analyzer.config.aic_tables`): AIConfigurator's measured tables
(tests/fixtures/aic/, made by tools/aic/tabulate.py with aiconfigurator 0.12.0), interpolated
exactly at the grid, piecewise-linearly between, linearly beyond; steps composed as AIC's
mixed step; tables cached on disk; and the validation figures (tools/aic/validate.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.config import aic_tables
from analyzer.config.aic_tables import (
    MISSING_EXTRA,
    TableStep,
    aic_model,
    aic_system,
    cache_path,
    load_table,
    tabulated,
)
from analyzer.errors import ConfigError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "aic"
TABLES = sorted(p for p in FIXTURES.glob("*.json") if p.name != "validation.json")
QWEN = FIXTURES / "qwen3.5-35b-a3b_h200_tp1.json"


def _raw(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(params=TABLES, ids=[p.stem for p in TABLES])
def table(request) -> tuple[dict, TableStep]:
    return _raw(request.param), load_table(request.param)


def test_fixtures_are_real_tables():
    assert len(TABLES) >= 3
    for path in TABLES:
        raw = _raw(path)
        assert raw["source"].startswith("aiconfigurator 0.12.0 ")
        assert raw["source"].endswith(" vllm 0.24.0")
        step = load_table(path)
        assert step.tensor_parallel == raw["tensor_parallel"]
        assert "measured table: aiconfigurator 0.12.0" in step.describe()


def test_exact_at_grid_points(table):
    raw, step = table
    pre, dec = raw["prefill"], raw["decode"]
    for i, n in enumerate(pre["new_tokens"]):
        for j, p in enumerate(pre["prefix_tokens"]):
            assert step.prefill_ms(n, p) == pytest.approx(pre["ms"][i][j], abs=1e-9)
            if n > 0:  # one chunk alone, through the step interface (seconds)
                assert step.step_s([(n, p)], 0, 0) == pytest.approx(pre["ms"][i][j] * 1e-3)
    for i, b in enumerate(dec["batch"]):
        for j, c in enumerate(dec["context_tokens"]):
            assert step.decode_ms(b, c) == pytest.approx(dec["ms"][i][j], abs=1e-9)
            assert step.step_s([], b, b * c) == pytest.approx(dec["ms"][i][j] * 1e-3)


def test_piecewise_linear_between_grid_points(table):
    raw, step = table
    pre, dec = raw["prefill"], raw["decode"]
    news, ms = pre["new_tokens"], pre["ms"]
    for i in range(len(news) - 1):
        mid = (news[i] + news[i + 1]) / 2
        assert step.prefill_ms(mid, 0) == pytest.approx((ms[i][0] + ms[i + 1][0]) / 2)
    prefixes = pre["prefix_tokens"]
    for j in range(len(prefixes) - 1):  # bilinear: the middle of a cell is its corners' mean
        mid_p = (prefixes[j] + prefixes[j + 1]) / 2
        mid_n = (news[5] + news[6]) / 2
        corners = ms[5][j] + ms[5][j + 1] + ms[6][j] + ms[6][j + 1]
        assert step.prefill_ms(mid_n, mid_p) == pytest.approx(corners / 4)
    batch, contexts, dms = dec["batch"], dec["context_tokens"], dec["ms"]
    for j in range(len(contexts) - 1):
        mid = (contexts[j] + contexts[j + 1]) / 2
        assert step.decode_ms(batch[3], mid) == pytest.approx((dms[3][j] + dms[3][j + 1]) / 2)


def test_linear_extrapolation_beyond_the_grid(table):
    raw, step = table
    pre, dec = raw["prefill"], raw["decode"]
    n, ms = pre["new_tokens"], pre["ms"]
    slope = (ms[-1][0] - ms[-2][0]) / (n[-1] - n[-2])
    for extra in (1, 1000, 65536):
        assert step.prefill_ms(n[-1] + extra, 0) == pytest.approx(ms[-1][0] + slope * extra)
    b, c, dms = dec["batch"], dec["context_tokens"], dec["ms"]
    slope_c = (dms[4][-1] - dms[4][-2]) / (c[-1] - c[-2])
    assert step.decode_ms(b[4], 2 * c[-1]) == pytest.approx(dms[4][-1] + slope_c * c[-1])
    slope_b = (dms[-1][2] - dms[-2][2]) / (b[-1] - b[-2])
    assert step.decode_ms(1024, c[2]) == pytest.approx(dms[-1][2] + slope_b * (1024 - b[-1]))
    # below the grid: the first segment, extended (context 64 < the smallest, 128)
    slope_0 = (dms[0][1] - dms[0][0]) / (c[1] - c[0])
    assert step.decode_ms(1, 64) == pytest.approx(dms[0][0] - slope_0 * 64)


@settings(max_examples=200, deadline=None)
@given(a=st.floats(1, 200_000), b=st.floats(1, 200_000), prefix=st.sampled_from([0, 5000]))
def test_monotone_in_new_tokens(a, b, prefix):
    for path in TABLES:  # AIC's prefill columns all rise with the new tokens
        step = load_table(path)
        lo, hi = sorted((a, b))
        assert step.prefill_ms(lo, prefix) <= step.prefill_ms(hi, prefix) + 1e-9


@settings(max_examples=200, deadline=None)
@given(c1=st.floats(1, 300_000), c2=st.floats(1, 300_000), batch=st.integers(1, 600))
def test_decode_monotone_in_context_and_within_each_cell(c1, c2, batch):
    for path in TABLES:
        step = load_table(path)
        lo, hi = sorted((c1, c2))
        assert step.decode_ms(batch, lo) <= step.decode_ms(batch, hi) + 1e-9
    # the Qwen table rises with batch too; the Llama ones dip a little at batch 2-8
    # (AIC's own figures), so there the value just stays within its cell's corners
    step = load_table(QWEN)
    assert step.decode_ms(batch, c1) <= step.decode_ms(batch + 1, c1) + 1e-9


def test_interpolant_stays_within_each_segment(table):
    raw, step = table
    dec = raw["decode"]
    b, dms = dec["batch"], dec["ms"]
    for i in range(len(b) - 1):
        for frac in (0.1, 0.5, 0.9):
            x = b[i] + frac * (b[i + 1] - b[i])
            lo, hi = sorted((dms[i][4], dms[i + 1][4]))
            assert lo - 1e-9 <= step.decode_ms(x, dec["context_tokens"][4]) <= hi + 1e-9


def test_step_composition():
    step = load_table(QWEN)
    assert step.step_s([], 0, 0) == 0.0
    assert step.step_s([(0, 0)], 0, 0) == 0.0
    # chunks: their new tokens add, their prefix is the token-weighted mean
    two = step.step_s([(1000, 0), (3000, 8000)], 0, 0)
    assert two == pytest.approx(step.prefill_ms(4000, 6000) * 1e-3)
    # decodes alone: the mean context
    assert step.step_s([], 4, 4 * 1000 + 3 * 20) == pytest.approx(step.decode_ms(4, 1015) * 1e-3)
    # mixed: decode tokens ride the prefill's weights; their KV reads come by difference
    reads = step.decode_ms(64, 9000) - step.decode_ms(64, 128)
    expected = step.prefill_ms(2048 + 64, 4096) + reads
    assert step.step_s([(2048, 4096)], 64, 64 * 9000) == pytest.approx(expected * 1e-3)
    # never less than the prefill alone, and cheaper than pricing the two apart
    mixed = step.step_s([(8192, 0)], 128, 128 * 8192)
    assert step.prefill_ms(8192) * 1e-3 < mixed
    assert mixed < (step.prefill_ms(8192) + step.decode_ms(128, 8192)) * 1e-3


# AIConfigurator 0.12.0's own mixed step (EngineHandle.mixed_step_latency(N, B, isl=8192,
# osl=1, prefix=0)) for Qwen3.5-35B-A3B on h200_sxm, vLLM 0.24.0, TP1: N new prompt tokens
# with B requests decoding at 8,192 tokens of context. Its context attention is a 8,192-token
# prompt's / ceil(8192 / N), where hpa's table prices N new tokens after no prefix: a few %.
AIC_MIXED_MS = {(8192, 128): 119.51, (2048, 128): 48.19, (512, 128): 30.06, (2048, 32): 43.57}


@pytest.mark.parametrize(("new", "batch"), sorted(AIC_MIXED_MS))
def test_mixed_step_close_to_aic_own(new, batch):
    step = load_table(QWEN)
    ours = step.step_s([(new, 0)], batch, batch * 8192) * 1e3
    assert ours == pytest.approx(AIC_MIXED_MS[(new, batch)], rel=0.03)


def test_step_is_cheap():
    step = load_table(QWEN)
    chunks = [(2048, 4096)]
    start = time.perf_counter()
    for _ in range(20_000):
        step.step_s(chunks, 64, 576_000)
    assert (time.perf_counter() - start) / 20_000 < 100e-6  # about 4 us here


def test_no_aiconfigurator_import_at_module_level():
    code = "import sys, analyzer.config.aic_tables; print('aiconfigurator_core' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.pop("decode"), "missing the 'decode' object"),
        (lambda t: t["prefill"]["ms"].pop(), "one row per new_tokens value"),
        (lambda t: t["decode"]["ms"][0].pop(), "one value per context_tokens"),
        (lambda t: t["decode"]["batch"].reverse(), "'batch' must be a non-empty increasing"),
        (lambda t: t["prefill"]["ms"][0].__setitem__(0, -1), "values must be numbers >= 0"),
        (lambda t: t["prefill"].__setitem__("prefix_tokens", []), "'prefix_tokens' must be"),
    ],
)
def test_bad_tables_are_config_errors(tmp_path, mutate, message):
    raw = _raw(QWEN)
    mutate(raw)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=message):
        load_table(path)


def test_unreadable_tables(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_table(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="not JSON"):
        load_table(tmp_path / "bad.json")


def test_one_point_axes():
    raw = {
        "prefill": {"new_tokens": [1, 1001], "prefix_tokens": [0], "ms": [[5.0], [15.0]]},
        "decode": {"batch": [1], "context_tokens": [100, 200], "ms": [[3.0, 4.0]]},
    }
    step = TableStep(raw)
    assert step.prefill_ms(501, 99_999) == pytest.approx(10.0)
    assert step.decode_ms(64, 150) == pytest.approx(3.5)


def test_models_and_gpus():
    assert aic_system("H200") == "h200_sxm" and aic_system("b200") == "b200_sxm"
    with pytest.raises(ConfigError, match="no database for MI300X"):
        aic_system("MI300X")
    assert aic_model("Qwen/Qwen3.5-35B-A3B") == ("Qwen/Qwen3.5-35B-A3B", "Qwen--Qwen3.5-35B-A3B")
    with pytest.raises(ConfigError, match="is a preset"):
        aic_model("qwen3-next-80b-a3b")


def test_config_json_models_are_keyed_by_content(tmp_path):
    folder = tmp_path / "My Model"
    folder.mkdir()
    config = folder / "config.json"
    config.write_text('{"architectures": ["LlamaForCausalLM"]}')
    source, slug = aic_model(str(config))
    assert source == str(config) and slug.startswith("My_Model-")
    assert aic_model(str(folder)) == (source, slug)
    config.write_text('{"architectures": ["LlamaForCausalLM"], "hidden_size": 1}')
    assert aic_model(str(config))[1] != slug
    preset_like = tmp_path / "preset.json"
    preset_like.write_text('{"block_size": 16, "groups": ["full_attention"]}')
    with pytest.raises(ConfigError, match="not a Hugging Face config.json"):
        aic_model(str(preset_like))


def test_cache_location(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = cache_path("Qwen/Qwen3.5-35B-A3B", "H200", 1)
    assert path.parent == tmp_path / "xdg" / "hpa" / "aic"
    assert path.name.startswith("Qwen--Qwen3.5-35B-A3B__h200_sxm__tp1__aic")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_path("Qwen/Qwen3.5-35B-A3B", "H200", 2).parent == (
        tmp_path / "home" / ".cache" / "hpa" / "aic"
    )


def test_tabulated_reads_the_cache_without_the_extra(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(aic_tables, "aic_installed", lambda: False)
    with pytest.raises(ConfigError) as error:
        tabulated("Qwen/Qwen3.5-35B-A3B", "H200", 1)
    assert str(error.value) == MISSING_EXTRA
    assert MISSING_EXTRA == (
        "step model 'aic' needs the aic extra: pip install 'hybrid-prefix-analyzer[aic]'"
    )
    path = cache_path("Qwen/Qwen3.5-35B-A3B", "H200", 1)
    path.parent.mkdir(parents=True)
    path.write_text(QWEN.read_text())
    step = tabulated("Qwen/Qwen3.5-35B-A3B", "H200", 1)
    assert step.prefill_ms(8192) == pytest.approx(112.9002)


def test_tabulated_makes_and_caches_a_table_with_the_extra(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(aic_tables, "aic_installed", lambda: True)
    calls = []

    def fake_tabulate(model, system, tp, *, gpu_name=None):
        calls.append((model, system, tp, gpu_name))
        return _raw(QWEN)

    monkeypatch.setattr(aic_tables, "tabulate", fake_tabulate)
    first = tabulated("Qwen/Qwen3.5-35B-A3B", "H200", 1)
    second = tabulated("Qwen/Qwen3.5-35B-A3B", "H200", 1)
    assert calls == [("Qwen/Qwen3.5-35B-A3B", "h200_sxm", 1, "H200")]
    assert first.table == second.table
    assert cache_path("Qwen/Qwen3.5-35B-A3B", "H200", 1).exists()


def test_a_cache_file_of_a_long_name_is_written(monkeypatch, tmp_path):
    """A cache name the folder takes is written, its temporary file having a short name of
    its own: `KEY.PID.tmp` was past 255 bytes for a KEY of 250 (a long model folder's)."""
    path = tmp_path / ("k" * 250 + ".json")
    monkeypatch.setattr(aic_tables, "cache_path", lambda model, gpu, tp: path)
    monkeypatch.setattr(aic_tables, "aic_installed", lambda: True)
    monkeypatch.setattr(aic_tables, "tabulate", lambda *args, gpu_name=None: _raw(QWEN))
    tabulated("Qwen/Qwen3.5-35B-A3B", "H200", 1)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    assert _raw(path) == _raw(QWEN)


VALIDATION = _raw(FIXTURES / "validation.json")


def test_validation_figures_cover_ten_settings():
    rows = VALIDATION["settings"]
    assert len(rows) >= 10
    assert len({(r["model"], r["gpu"], r["tensor_parallel"]) for r in rows}) == len(rows)
    assert {r["gpu"] for r in rows} >= {"H100", "H200", "B200"}
    kinds = " ".join(r["kind"] for r in rows)
    for kind in ("dense", "MoE", "GDN", "Mamba", "sliding window", "MLA"):
        assert kind in kinds
    for row in rows:
        assert row["source"] == f"aiconfigurator 0.12.0 {row['system']} vllm 0.24.0"
        assert row["config"].startswith("aiconfigurator_core/model_configs/")
        assert set(row["prefill_ms"]) == {"1024", "8192", "32768"}
        assert set(row["decode_ms"]) == {"1", "32", "128"}
        pre, dec = row["prefill_ms"], row["decode_ms"]
        assert 0 < pre["1024"] < pre["8192"] < pre["32768"]
        assert 0 < dec["1"] < dec["32"] < dec["128"]


def test_fixture_tables_agree_with_the_validation_figures():
    rows = {(r["model"], r["gpu"], r["tensor_parallel"]): r for r in VALIDATION["settings"]}
    for path in TABLES:
        step = load_table(path)
        row = rows[(step.model, step.gpu, step.tensor_parallel)]
        for tokens, ms in row["prefill_ms"].items():
            assert step.prefill_ms(int(tokens)) == pytest.approx(ms, abs=1e-3)
        for batch, ms in row["decode_ms"].items():
            assert step.decode_ms(int(batch), 8192) == pytest.approx(ms, abs=1e-3)


def test_a_real_tabulation_matches_the_fixture():
    """Only where AIConfigurator is installed (the `aic` extra): the table it makes now is
    the fixture's, number for number."""
    pytest.importorskip("aiconfigurator_core")
    made = aic_tables.tabulate("Qwen/Qwen3.5-35B-A3B", "h200_sxm", 1, gpu_name="H200")
    assert made == _raw(QWEN)
