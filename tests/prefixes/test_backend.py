"""Backend selection: names, errors, and the CuPy path when CuPy is absent."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

from analyzer.errors import BackendUnavailable, ConfigError
from analyzer.prefixes.backend import BACKENDS, backend_name, get_xp, to_numpy


def _no_cupy(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "cupy" or name.startswith("cupy."):
            raise ImportError("No module named 'cupy'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)


def test_numpy_is_always_there():
    assert get_xp("numpy") is np
    assert backend_name(np) == "numpy"


def test_unknown_backend_lists_the_names():
    expected = "unknown backend 'torch'; choose one of auto, numpy, cupy"
    with pytest.raises(ConfigError, match=expected):
        get_xp("torch")
    assert BACKENDS == ("auto", "numpy", "cupy")


def test_auto_falls_back_to_numpy_without_cupy(monkeypatch):
    _no_cupy(monkeypatch)
    assert get_xp("auto") is np


def test_auto_is_numpy_where_no_card_is_measured(monkeypatch):
    # the radix trees on the CPU beat the first GPU matcher on an H200 (docs/benchmarks.md)
    import analyzer.prefixes.backend as backend

    monkeypatch.setattr(backend, "_cupy_namespace", lambda: "a usable cupy")
    monkeypatch.setattr(backend, "_card_name", lambda: pytest.fail("probed a card"))
    assert backend.GPU_WINS_FROM_UNITS == {}
    assert get_xp("auto", units=10**12) is np
    assert get_xp("cupy") == "a usable cupy"


MEASURED = {"NVIDIA H100 80GB HBM3": 4_000_000}


@pytest.mark.parametrize(
    ("card", "units", "chosen"),
    [
        ("NVIDIA H100 80GB HBM3", 4_000_000, "cupy"),  # from the measured size on
        ("NVIDIA H100 80GB HBM3", 3_999_999, "numpy"),  # below it the radix tree wins
        ("NVIDIA H100 80GB HBM3", None, "numpy"),  # a size not given: the CPU
        ("NVIDIA H200", 10**9, "numpy"),  # a card not measured
        (None, 10**9, "numpy"),  # no card, or no CuPy
    ],
)
def test_auto_takes_a_measured_card_from_its_crossover(monkeypatch, card, units, chosen):
    import analyzer.prefixes.backend as backend

    monkeypatch.setattr(backend, "_cupy_namespace", lambda: "a usable cupy")
    monkeypatch.setattr(backend, "_card_name", lambda: card)
    got = get_xp("auto", units=units, measured=MEASURED)
    assert (got is np and chosen == "numpy") or (got == "a usable cupy" and chosen == "cupy")


def test_auto_falls_back_when_the_measured_card_cannot_be_used(monkeypatch):
    import analyzer.prefixes.backend as backend

    def unusable():
        raise backend._Unavailable("out of memory")

    monkeypatch.setattr(backend, "_cupy_namespace", unusable)
    monkeypatch.setattr(backend, "_card_name", lambda: "NVIDIA H100 80GB HBM3")
    assert get_xp("auto", units=10**9, measured=MEASURED) is np


def test_card_probe_is_none_without_cupy(monkeypatch):
    import importlib.util

    import analyzer.prefixes.backend as backend

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert backend._card_name() is None


def test_demanding_cupy_without_it_says_what_to_do(monkeypatch):
    _no_cupy(monkeypatch)
    with pytest.raises(BackendUnavailable) as err:
        get_xp("cupy")
    message = str(err.value)
    assert message.startswith("CuPy requested but not usable: cannot import cupy")
    assert message.endswith("install hybrid-prefix-analyzer[gpu] or use --backend numpy")
    assert err.value.exit_code == 2


def test_module_never_imports_cupy_at_import_time():
    import sys

    import analyzer.pipeline.match  # noqa: F401
    import analyzer.prefixes.backend  # noqa: F401

    assert "cupy" not in sys.modules or sys.modules["cupy"] is not None


def test_to_numpy_accepts_other_array_libraries():
    xp = pytest.importorskip("array_api_strict")
    out = to_numpy(xp.asarray([1, 2, 3], dtype=xp.uint64))
    assert isinstance(out, np.ndarray) and out.tolist() == [1, 2, 3]
