# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HPA := $(VENV)/bin/hpa
STAMP := $(VENV)/.installed

.PHONY: install demo test lint wheel-check bench bench-process bench-e2e bench-ingest bench-replay bench-peer bench-fleet bench-plan bench-plan-fleet schemas samples clean

NATIVE := analyzer/native.h analyzer/prefixes/radix_loop.c analyzer/traces/token_scan_loop.c

$(STAMP): pyproject.toml setup.py $(NATIVE)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'  # builds the C loops in place (setup.py)
	$(PY) -m analyzer.kernels  # compiled once, into analyzer/**/__pycache__ (setup.py's step)
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(HPA) demo --out build/demo

test: $(STAMP)
	$(PY) -m pytest -q --durations=15  # the slowest, for the 15-minute budget on 2 cores

# The C loops' tests under AddressSanitizer and UBSan: both extensions built with them into
# build/asan (the checkout's in-place build stays as it is), then the radix loop's, the token
# scanner's and the hostile-argument tests run against that build (tools/asan/run_tests.py
# loads it), with ASan's runtime preloaded. An access out of bounds, a use after free or
# undefined behaviour aborts the run; pytest captures at the sys level only, so the
# sanitizer's report reaches the terminal. docs/contributing.md, "Compiled kernels".
ASAN_BUILD := build/asan
ASAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
ASAN_TESTS := tests/test_native_contents.py tests/prefixes/test_radix.py tests/traces/test_token_scan.py
.PHONY: asan
asan: $(STAMP)
	rm -rf $(ASAN_BUILD)
	CFLAGS="$(ASAN_FLAGS) -g" LDFLAGS="$(ASAN_FLAGS)" $(PY) setup.py -q build_ext \
		--build-lib $(ASAN_BUILD) --build-temp $(ASAN_BUILD)/temp
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0 \
		UBSAN_OPTIONS=print_stacktrace=1 $(PY) tools/asan/run_tests.py $(ASAN_BUILD) \
		-q -p no:cacheprovider --capture=sys $(ASAN_TESTS)

# The package as users get it: sdist -> wheel -> a fresh venv (not editable) -> the README
# tour in a temp folder outside the clone (.ci/wheel_tour.sh, ~35 s with a warm pip cache).
wheel-check: $(STAMP)
	PY=$(abspath $(PY)) bash .ci/wheel_tour.sh

# Style, and the dependency rule: the layers contract in pyproject.toml (import-linter).
lint: $(STAMP)
	$(VENV)/bin/ruff check analyzer tests bench tools setup.py
	$(VENV)/bin/ruff format --check analyzer tests bench tools setup.py
	$(VENV)/bin/lint-imports --no-cache

# Every benchmark, each against a peer or a naive baseline in the same run.
bench: bench-process bench-e2e bench-ingest bench-match bench-replay bench-peer bench-scale bench-concurrent bench-fleet bench-plan bench-plan-fleet

# Whole processes as a user times them, beside the in-process figures: start-up, each
# command's fixed cost and peak RSS above its base, the peers as processes, and the first
# run with numba's cache empty vs as installed (28 M tokens, 3 runs each, ~4 min with the
# dict-trie; PROCESS_TOKENS=70.8e6 NO_TRIE=1 for the larger trace).
bench-process: $(STAMP)
	$(PY) bench/bench_process.py --tokens $(or $(PROCESS_TOKENS),28e6) $(if $(NO_TRIE),--no-trie)

# End to end: token ids -> last-half hit ratio, hpa (ingest + replay) vs kvcache-simulator
# (conversion to hash ids + run), at 28 M and 70 M prompt tokens, 3 paired runs each
# (medians); peak RSS of hpa ingest, match, replay and report (~5 min).
E2E_TOKENS ?= 28000000 70000000
bench-e2e: $(STAMP)
	for tokens in $(E2E_TOKENS); do $(PY) bench/bench_e2e.py --tokens $$tokens || exit 1; done

# A fleet behind a router: hpa's concurrent replay (every router) vs NVIDIA Dynamo's offline
# replay (round_robin, kv_router) on the Mooncake trace at 2, 4 and 8 replicas, each a whole
# process, 3 runs (median wall; ~5 min). Needs Dynamo's venv (bench/dynamo_replay.py says how;
# without it, hpa's rows only).
bench-fleet: $(STAMP)
	$(PY) bench/bench_fleet.py --runs $(or $(FLEET_RUNS),3)

bench-ingest: $(STAMP)
	$(PY) bench/bench_ingest.py

# Replay vs vLLM 0.33's own scheduler (the oracle venv of ../shared/oracle, when present).
bench-replay: $(STAMP)
	$(PY) bench/bench_replay.py

# hpa vs kvcache-simulator (PyPI) on the Mooncake conversation trace (installs the peer).
bench-peer: $(STAMP)
	$(PY) bench/bench_peer.py

# hpa plan against a naive plan (whole-trace replays only) on the sample and public traces.
bench-plan: $(STAMP)
	$(PY) bench/bench_plan.py

bench-plan-fleet: $(STAMP)
	$(PY) bench/bench_plan_fleet.py $(if $(NAIVE),--naive)

# analyzer/schemas/policy.schema.json from the config tables (tests/config/test_schema.py checks it).
schemas: $(STAMP)
	$(PY) -m analyzer.config.schema > analyzer/schemas/policy.schema.json

samples: $(STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH bash sample_traces/make_samples.sh

clean:
	rm -rf build .pytest_cache .ruff_cache

.PHONY: bench-match bench-gpu
# Prefix matcher: NumPy vs a plain Python dict-trie on a >= 50 M-token trace (a few minutes,
# ~9 GiB for the trie); `make bench-match TOKENS=5e6` for a quick run.
TOKENS ?= 50e6
bench-match: $(STAMP)
	$(PY) bench/bench_match.py --tokens $(TOKENS)

# On a GPU machine: CuPy tests and CuPy vs NumPy throughput; installs nothing (see the script).
bench-gpu:
	bash bench/gpu_check.sh

.PHONY: bench-scale
# Executors: match and replay with 1 and 2 workers, processes and Ray (about 3 minutes).
bench-scale: $(STAMP)
	$(PY) bench/bench_scale.py

.PHONY: bench-concurrent
# Concurrent replay vs the oracle's --concurrent mode on 2,000 requests (3 layouts; hpa's
# serial replay as the baseline without the oracle), 3 paired runs (medians), then a serial vs
# concurrent capacity curve.
bench-concurrent: $(STAMP)
	$(PY) bench/bench_concurrent.py
