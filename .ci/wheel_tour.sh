#!/usr/bin/env bash
# The package as users get it: build the sdist from the checkout, the wheel from that sdist
# (what `python -m build` does), install the wheel (not editable) into a fresh venv, then run
# the README's tour with that venv's `hpa` in a temporary folder outside the clone. Fails on
# the first command that fails. tests/test_docs.py runs the README itself from the checkout;
# this runs the same steps against the installed files (presets, schemas, SQL), on a smaller
# trace (400 requests instead of 3,000): about 35 s with pip's cache warm, most of it pip.
#
#   bash .ci/wheel_tour.sh              # `make wheel-check`; `.ci/run` after `make test`
#   PY=/path/python KEEP=1 bash ...     # the Python that builds; keep the temp folder
#
# Needs a Python with setuptools >= 77 to build (the dev venv has it: `pip install -e .[dev]`)
# and the package index (or pip's cache) for the fresh venv's dependencies.
set -euo pipefail
clone="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PY:-$clone/.venv/bin/python}"
[ -x "$PY" ] || PY=python3
unset PYTHONPATH  # the tour must import the installed package, nothing else
unset NUMBA_CACHE_DIR  # and load its kernels from the package's own cache

work="$(mktemp -d "${TMPDIR:-/tmp}/hpa-wheel-tour.XXXXXX")"
case "$work/" in "$clone"/*) echo "wheel tour: $work is inside the clone" >&2; exit 1 ;; esac
if [ "${KEEP:-0}" = 1 ]; then
    echo "wheel tour: keeping $work"
else
    trap 'rm -rf "$work"' EXIT
fi

start=$SECONDS
step() { echo "--- [$((SECONDS - start)) s] $*"; }

step "sdist from a copy of the sources (no build/ or egg-info left in the clone)"
mkdir -p "$work/source" "$work/dist" "$work/unpacked"
cp "$clone/pyproject.toml" "$clone/setup.py" "$clone/MANIFEST.in" "$clone/README.md" "$work/source/"
(cd "$clone" && tar --exclude=__pycache__ -cf - analyzer) | tar -xf - -C "$work/source"
hook() {  # hook NAME: setuptools' PEP 517 hook in the current folder; prints the file it made
    "$PY" -c "import setuptools.build_meta as b, sys; print(b.$1(sys.argv[1]))" "$work/dist" |
        tail -n 1
}
sdist="$(cd "$work/source" && hook build_sdist)"
step "wheel from the sdist ($sdist)"
tar -xzf "$work/dist/$sdist" -C "$work/unpacked"
wheel="$(cd "$work/unpacked"/* && hook build_wheel)"

step "fresh venv, pip install $wheel (not editable)"
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$work/dist/$wheel"
hpa="$work/venv/bin/hpa"

mkdir "$work/tour"
cd "$work/tour"  # from here on, no folder of the clone is on sys.path
installed="$("$work/venv/bin/python" -c 'import analyzer; print(analyzer.__file__)')"
case "$installed" in
    "$work/venv/"*) echo "analyzer imported from $installed" ;;
    *) echo "wheel tour: analyzer imported from $installed, not the fresh venv" >&2; exit 1 ;;
esac
run() { step "hpa $*"; "$hpa" "$@"; }

# The wheel carries its C loops built and numba's kernels compiled (setup.py): the tour must
# compile none, so numba's cache files in the installed package stay as pip wrote them.
missing="$("$work/venv/bin/python" -c 'from analyzer import kernels; print(*kernels.native_missing())')"
[ -z "$missing" ] || { echo "wheel tour: C loops not built into the wheel: $missing" >&2; exit 1; }
kernels() { find "${installed%/*}" -name '*.nb[ic]' -printf '%P %s %T@\n' | sort; }
shipped="$(kernels)"
[ -n "$shipped" ] || { echo "wheel tour: the wheel holds no compiled kernels" >&2; exit 1; }
echo "compiled kernels in the wheel: $(printf '%s\n' "$shipped" | grep -c '\.nbc ')"

# A user's mistake is one line naming every preset, from the installed package's files.
step "hpa replay --policy nope (must fail, listing the presets)"
if out="$("$hpa" replay --db none.duckdb --policy nope 2>&1)"; then
    echo "wheel tour: --policy nope succeeded" >&2; exit 1
fi
echo "$out"
case "$out" in
    *"no such file or preset; presets: "*vllm-default*) ;;
    *) echo "wheel tour: the preset listing is missing or empty" >&2; exit 1 ;;
esac
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || { echo "wheel tour: not one line" >&2; exit 1; }

# The README's tour, in its order.
run synth traffic.jsonl --scenario mixed --num-requests 400 --seed 1
run ingest traffic.jsonl --db traffic.duckdb
run match --db traffic.duckdb
run replay --db traffic.duckdb --policy vllm-default --set model=qwen3-next-80b-a3b
run replay --db traffic.duckdb --policy vllm-default --set model=qwen3-next-80b-a3b \
    --set retention_interval=null
run replay --db traffic.duckdb --policy vllm-concurrent --set model=qwen3-next-80b-a3b \
    --set num_blocks=400 --set time_scale=0.2
run query "SELECT request_id, prompt_family, prompt_tokens, hit_tokens,
                  sparse_retention_miss_tokens, junction_tokens
           FROM replay_requests WHERE run_id = 1
           ORDER BY sparse_retention_miss_tokens DESC LIMIT 10" --db traffic.duckdb
run query "SELECT path, line_no, field, reason FROM rejects" --db traffic.duckdb
run replay --db traffic.duckdb --policy vllm-default,sglang-default,marconi-default,oracle \
    --set model=qwen3-next-80b-a3b
run report --db traffic.duckdb -o report.html
[ -s report.html ] || { echo "wheel tour: no report.html" >&2; exit 1; }

if [ "$(kernels)" != "$shipped" ]; then
    echo "wheel tour: a command compiled a kernel the wheel lacks (analyzer/kernels.py):" >&2
    diff <(printf '%s\n' "$shipped") <(kernels) >&2 || true
    exit 1
fi
step "wheel tour passed (no kernel compiled)"
