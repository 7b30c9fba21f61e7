#!/usr/bin/env bash
# GPU check for the prefix matcher (`make bench-gpu`): the CuPy tests, then CuPy vs NumPy on
# one generated trace (answers must be identical) with each backend's throughput.
#
# Installs nothing from the network. When CuPy is missing it only installs wheels carried
# in $WHEELS (default bench/wheels/, e.g. cupy_cuda12x-*.whl and its fastrlock wheel), with
# pip --no-index. Environment: TOKENS (default 50e6), CHUNK_TOKENS (default 67108864).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
WHEELS=${WHEELS:-bench/wheels}
TOKENS=${TOKENS:-50e6}
CHUNK_TOKENS=${CHUNK_TOKENS:-67108864}

if ! "$PY" -c "import cupy" 2>/dev/null; then
    if compgen -G "$WHEELS/cupy*.whl" >/dev/null; then
        echo "installing CuPy from carried wheels in $WHEELS (no network)"
        "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" "$WHEELS"/cupy*.whl
    else
        echo "CuPy is not installed and no wheels are carried in $WHEELS; nothing to check" >&2
        exit 2
    fi
fi
"$PY" - <<'PYEOF'
from analyzer.prefixes.backend import get_xp
xp = get_xp("cupy")  # raises a clear BackendUnavailable when no device is usable
props = xp.cuda.runtime.getDeviceProperties(0)
print("device:", props["name"].decode(), f"{props['totalGlobalMem'] / 2**30:.0f} GiB")
PYEOF

echo "== CuPy tests (pytest -m gpu)"
"$PY" -m pytest -q -m gpu tests/prefixes

echo "== CuPy vs NumPy on a generated trace (sequences preloaded: matcher time only)"
"$PY" bench/bench_match.py --tokens "$TOKENS" --backends numpy,cupy --no-trie \
    --source memory --chunk-tokens "$CHUNK_TOKENS"
