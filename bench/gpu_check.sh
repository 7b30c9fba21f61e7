#!/usr/bin/env bash
# GPU check for the prefix matcher (`make bench-gpu`, at most ~5 minutes at 50 M tokens): the
# CuPy tests, then bench/bench_gpu.py: the device's sort and scan rates, the sort matcher on
# CuPy against the C radix tree in process (answers must be identical), and `hpa match
# --backend cupy` against `--backend numpy` as whole processes, first run and warm. The
# figures go to $OUT/bench_gpu.json ($OUT: the device machine's output folder; else here).
#
# Installs nothing from the network. What the machine's Python lacks (CuPy; duckdb and orjson,
# which the tests' fixtures and the DuckDB-backed source import; a GPU image often has numpy,
# numba, pyarrow, click, pytest and hypothesis but not these) is installed only from wheels
# carried in $WHEELS (default bench/wheels/), with pip --no-index, into a private directory
# ($SITE, default /tmp/hpa-site) put first on PYTHONPATH: the image's own packages stay as
# they are. Environment: TOKENS (default 50e6), OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
WHEELS=${WHEELS:-bench/wheels}
SITE=${SITE:-/tmp/hpa-site}
TOKENS=${TOKENS:-50e6}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the analyzer package, not installed

if ! "$PY" -c "import cupy, duckdb, orjson" 2>/dev/null; then
    if compgen -G "$WHEELS/*.whl" >/dev/null; then
        echo "installing the wheels carried in $WHEELS into $SITE (no network)"
        "$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target "$SITE" "$WHEELS"/*.whl
        export PYTHONPATH="$SITE:$PYTHONPATH"
    fi
    for module in cupy duckdb orjson; do
        if ! "$PY" -c "import $module" 2>/dev/null; then
            echo "$module is not installed and no wheel of it is carried in $WHEELS; nothing to check" >&2
            exit 2
        fi
    done
fi
"$PY" - <<'PYEOF'
from analyzer.prefixes.backend import get_xp
xp = get_xp("cupy")  # raises a clear BackendUnavailable when no device is usable
props = xp.cuda.runtime.getDeviceProperties(0)
print("device:", props["name"].decode(), f"{props['totalGlobalMem'] / 2**30:.0f} GiB,",
      "CuPy", xp._cp.__version__)
PYEOF
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv

echo "== CuPy tests (pytest -m gpu)"
time "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/prefixes

echo "== sort and scan rates; the sort matcher vs the radix tree in process; hpa match as processes"
time "$PY" bench/bench_gpu.py --tokens "$TOKENS" --out "${OUT:-.}/bench_gpu.json"
