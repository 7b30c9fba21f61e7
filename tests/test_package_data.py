"""The package data ships: the sdist, and the wheel built from that sdist (as `python -m build`
does), hold every file of `analyzer/schemas/` and `analyzer/store/sql/` that git tracks, and
the package imported from the unpacked wheel (or from the wheel itself, a zip), outside the
clone, finds its presets.

The builds run setuptools' PEP 517 hooks in a subprocess with the venv's own setuptools (a dev
dependency), so no network and no build isolation: about a second each, so not marked slow.
`.ci/wheel_tour.sh` (`make wheel-check`) installs the wheel for real and runs the README tour
with it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

from analyzer.config import bundled
from analyzer.config.policy import read_source
from analyzer.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DATA_DIRS = ("analyzer/schemas", "analyzer/store/sql", "analyzer/prefixes/sort_kernels.cu")
# The first setuptools that reads pyproject's `license = "Apache-2.0"` (PEP 639).
MIN_SETUPTOOLS = (77,)


def _data_files() -> list[str]:
    """Repository paths of the package data, as git tracks them (on disk without git)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", *DATA_DIRS], cwd=ROOT, capture_output=True, check=True
        ).stdout.decode()
        files = sorted(f for f in out.split("\0") if f)
    except (OSError, subprocess.CalledProcessError):
        files = []
    if not files:  # not a git checkout (an unpacked sdist): what is there
        files = sorted(
            str(p.relative_to(ROOT))
            for d in DATA_DIRS
            for p in ((ROOT / d).rglob("*") if (ROOT / d).is_dir() else [ROOT / d])
            if p.is_file() and "__pycache__" not in p.parts
        )
    return files


def _hook(hook: str, source: Path, out: Path) -> Path:
    """Run setuptools' PEP 517 `hook` (build_sdist, build_wheel) in `source`; the file made."""
    code = f"import setuptools.build_meta as b; print(b.{hook}({str(out)!r}))"
    # Without setup.py's kernel step (40 s of compiling): .ci/wheel_tour.sh builds with it and
    # checks that the installed package runs the tour without compiling.
    env = dict(os.environ, HPA_BUILD_KERNELS="0")
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=source, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, f"{hook} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return out / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(sdist, wheel): the sdist of a copy of the sources, then the wheel of that sdist."""
    if tuple(int(p) for p in version("setuptools").split(".")[:1]) < MIN_SETUPTOOLS:
        pytest.skip(f"setuptools >= {MIN_SETUPTOOLS[0]} needed (pip install -e '.[dev]')")
    tmp = tmp_path_factory.mktemp("package")
    # A copy, so the build's build/ and *.egg-info never land in the checkout, and no stale
    # build/lib of an earlier build can put a deleted file back into the wheel.
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "analyzer", source / "analyzer", ignore=shutil.ignore_patterns("__pycache__")
    )
    sdist = _hook("build_sdist", source, tmp / "dist")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp / "unpacked", filter="data")
    [from_sdist] = (tmp / "unpacked").iterdir()
    wheel = _hook("build_wheel", from_sdist, tmp / "dist")
    return sdist, wheel


def test_there_is_package_data():
    files = _data_files()
    assert "analyzer/schemas/policies/vllm-default.json" in files
    assert "analyzer/schemas/models/qwen3-next-80b-a3b.json" in files
    assert "analyzer/schemas/policy.schema.json" in files
    assert "analyzer/schemas/trace.schema.json" in files
    assert "analyzer/store/sql/schema.sql" in files


def test_the_sdist_holds_the_package_data(built):
    sdist, _ = built
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    missing = [f for f in _data_files() if f not in names]
    assert not missing, f"{sdist.name} lacks {missing} (pyproject package-data)"


def test_the_wheel_holds_the_package_data(built):
    _, wheel = built
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    missing = [f for f in _data_files() if f not in names]
    assert not missing, f"{wheel.name} lacks {missing} (pyproject package-data)"
    # Only the package is installed: no top-level folder beside it in site-packages.
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"analyzer"}


# The C loops: their sources in the sdist, built into the wheel (setup.py's ext_modules).
NATIVE_SOURCES = (
    "analyzer/native.h",
    "analyzer/prefixes/radix_loop.c",
    "analyzer/traces/token_scan_loop.c",
)


def test_the_sdist_holds_the_c_sources_and_the_wheel_their_modules(built):
    sdist, wheel = built
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert not [f for f in NATIVE_SOURCES if f not in names], sorted(names)
    with zipfile.ZipFile(wheel) as whl:
        built_modules = {n.split(".")[0] for n in whl.namelist() if n.endswith(".so")}
    assert built_modules == {"analyzer/prefixes/radix_loop", "analyzer/traces/token_scan_loop"}


# Run in a child, outside the clone: what the installed package lists and reads.
PROBE = """
import json
import analyzer
from analyzer.config.models import load_model, model_names
from analyzer.config.policy import policy_values, presets, read_source
from analyzer.errors import ConfigError
try:
    read_source("nope")
except ConfigError as exc:
    error = str(exc)
print(json.dumps({
    "file": analyzer.__file__,
    "error": error,
    "models": model_names(),
    "block_size": load_model("qwen3-next-80b-a3b")["block_size"],
    "engine": policy_values("vllm-default", ["model=qwen3-next-80b-a3b"])["engine"],
}))
"""


def _probe(site: Path, cwd: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)  # ahead of the venv's editable finder (appended last)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _names(kind: str) -> list[str]:
    prefix = f"analyzer/schemas/{kind}/"
    return [f[len(prefix) : -len(".json")] for f in _data_files() if f.startswith(prefix)]


@pytest.mark.parametrize("layout", ["unpacked", "zip"])
def test_the_installed_package_finds_its_presets(built, tmp_path, layout):
    _, wheel = built
    if layout == "unpacked":  # what pip install puts in site-packages
        site = tmp_path / "site"
        with zipfile.ZipFile(wheel) as whl:
            whl.extractall(site)
    else:  # imported straight from the zip: the Traversable API only, no Path methods
        site = wheel
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    found = _probe(site, elsewhere)
    assert Path(found["file"]).is_relative_to(site), found["file"]
    policies = _names("policies")
    assert "vllm-default" in policies
    assert found["error"] == (
        f"policy 'nope': no such file or preset; presets: {', '.join(policies)}"
    )
    assert found["models"] == _names("models")
    assert (found["block_size"], found["engine"]) == (544, "vllm")


def test_a_missing_preset_folder_is_one_line_not_an_empty_list(tmp_path, monkeypatch):
    monkeypatch.setattr(bundled, "SCHEMAS", tmp_path / "schemas")  # a broken install
    message = "presets missing: no analyzer/schemas/policies/ in the installed package"
    with pytest.raises(ConfigError, match=message):
        read_source("vllm-default")
