"""The one-sort matcher (sort_match.py) and its fused kernels (sort_kernels.cu, built for
the host) against the compiled radix tree and the plain trie: every view, every answer."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import duckdb
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.access.sources import DuckDBSource
from analyzer.prefixes import engine, sort_device
from analyzer.prefixes.backend import _CuPyNamespace
from analyzer.prefixes.engine import MatchOptions, run_matcher
from analyzer.prefixes.memory import MemorySource, Request
from analyzer.prefixes.prefix_hash import HashParams
from analyzer.prefixes.sort_device import (
    Device,
    FusedSteps,
    check_layout,
    match_held,
    passes_for,
    source_text,
)
from analyzer.prefixes.sort_match import SortSteps, sort_match, view_rows
from analyzer.prefixes.source import PartitionSource

from .helpers import assert_same_arrays, assert_same_as_trie, requests_
from .host_kernels import HostKernels

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
RADIX = MatchOptions(compiled_min_units=0)
MASKS = (None, 0x1, 0x7, 0xFFFF)  # narrow keys: collisions everywhere, answers unchanged


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return HostKernels(tmp_path_factory.mktemp("sort_kernels"))


def _params(mask: int | None) -> HashParams:
    return HashParams() if mask is None else HashParams(key_mask=mask)


def _fused(kernels, xp=np):
    def steps(flat, params):
        return FusedSteps(xp.asarray(flat), kernels, params=params, xp=xp)

    return steps


def _plain(xp=np):
    def steps(flat, params):
        return SortSteps(xp.asarray(flat), params=params, xp=xp)

    return steps


def _as_arrays(views, n):
    """The per-view answers laid out as `MatchArrays` fields."""
    any_view = views["any"]
    return {
        "shared_any": any_view.L,
        "parent": any_view.p,
        "shared_replica": views.get("replica", any_view).L,
        "shared_conversation": (
            views["conversation"].L if "conversation" in views else np.full(n, -1)
        ),
        "insert_shared": any_view.e,
        "insert_parent": any_view.w,
    }


def _check(requests, make_steps, *, mask=None, passes=1, narrow=False, xp=np):
    source = MemorySource.from_requests(requests)
    flat = source.flat.astype(np.int32) if narrow else source.flat
    params = _params(mask)
    views = sort_match(
        source.meta,
        flat,
        source.offsets[:-1],
        xp=xp,
        params=params,
        steps=make_steps(flat, params),
        passes=passes,
    )
    ref = run_matcher(MemorySource.from_requests(requests), xp=np, options=RADIX)
    for field, got in _as_arrays(views, source.meta.n).items():
        assert np.array_equal(got, getattr(ref, field)), field
    return views


@SETTINGS
@given(requests_(), st.sampled_from(MASKS), st.sampled_from([1, 4]))
def test_plain_steps_equal_the_radix_tree(requests, mask, passes):
    _check(requests, _plain(), mask=mask, passes=passes)


@SETTINGS
@given(requests_(), st.sampled_from(MASKS), st.sampled_from([1, 2, 8]))
def test_fused_kernels_equal_the_radix_tree(kernels, requests, mask, passes):
    _check(requests, _fused(kernels), mask=mask, passes=passes)


@SETTINGS
@given(requests_(hash_ids=False), st.sampled_from(MASKS))
def test_int32_units_give_the_int64_answers(kernels, requests, mask):
    _check(requests, _fused(kernels), mask=mask, narrow=True)


class _NumPyAsCuPy(_CuPyNamespace):
    """The adapter over NumPy, whose argsort is made stable as CuPy's always is."""

    def argsort(self, x, /, *, axis=-1, stable=True):
        return np.argsort(x, axis=axis, kind="stable")


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(requests_(max_requests=14), st.sampled_from(MASKS))
def test_through_the_cupy_namespace_adapter(kernels, requests, mask):
    """CuPy's spelling of every call (the adapter over NumPy): the xp code uses nothing
    CuPy lacks."""
    cupy_like = _NumPyAsCuPy(np)
    _check(requests, _plain(cupy_like), mask=mask, xp=cupy_like)
    _check(requests, _fused(kernels, cupy_like), mask=mask, xp=cupy_like)


@SETTINGS
@given(requests_())
def test_the_engine_takes_it_when_asked_and_derives_the_same_junctions(requests):
    from analyzer.prefixes.result import compute

    got = compute(MemorySource.from_requests(requests), xp=np, options=MatchOptions(matcher="sort"))
    ref = compute(MemorySource.from_requests(requests), xp=np, options=RADIX)
    assert_same_arrays(got.arrays, ref.arrays)
    assert_same_as_trie(requests, got.arrays)
    assert got.arrays.path == "the sort matcher (numpy)"
    assert np.array_equal(got.path_junctions, ref.path_junctions)
    assert np.array_equal(got.path_requests, ref.path_requests)


@SETTINGS
@given(requests_(), st.sampled_from(MASKS))
def test_fused_keys_are_the_plain_keys_bit_for_bit(kernels, requests, mask):
    source = MemorySource.from_requests(requests)
    params, meta = _params(mask), source.meta
    rows = view_rows(meta, meta.ns_any, source.offsets[:-1], xp=np)
    plain, fused = (
        SortSteps(source.flat, params=params, xp=np),
        _fused(kernels)(source.flat, params),
    )
    for steps in (plain, fused):
        steps.bind(rows)
    for lo, hi in ((0, rows.units), (rows.units // 3, rows.units)):
        for a, b in zip(plain.element_keys(lo, hi), fused.element_keys(lo, hi), strict=True):
            assert np.array_equal(a, b)
    depths = np.maximum(rows.lens // 2, 1)
    asked = np.arange(rows.m)
    assert np.array_equal(plain.keys_at(asked, depths), fused.keys_at(asked, depths))


def test_sequences_anywhere_in_the_array(kernels):
    requests = [Request("a", prompt=(1, 2, 3)), Request("b", prompt=(1, 2, 4)), Request("c")]
    requests[2] = Request("c", prompt=(1, 2, 3, 5))
    flat = np.asarray([9, 1, 2, 3, 9, 9, 1, 2, 4, 1, 2, 3, 5], dtype=np.int64)
    starts = np.asarray([1, 6, 9])
    meta = MemorySource.from_requests(requests).meta
    for steps in (SortSteps(flat, xp=np), FusedSteps(flat, kernels, params=HashParams(), xp=np)):
        views = sort_match(meta, flat, starts, xp=np, steps=steps)
        assert views["any"].e.tolist() == [0, 2, 3]
        assert views["any"].w.tolist() == [-1, 0, 0]


CASES = {
    # name: requests, then per request (e, w, L, p) of the any view
    "identical": ([("a", (1, 2, 3)), ("b", (1, 2, 3))], [(0, -1, 0, -1), (3, 0, 3, 0)]),
    "prefix of an earlier one": (
        [("a", (1, 2, 3, 4)), ("b", (1, 2))],
        [(0, -1, 0, -1), (2, 0, 2, 0)],
    ),
    "own repeats only": ([("a", (7, 7, 7, 7)), ("b", (8, 7, 7))], [(0, -1, 0, -1)] * 2),
    "the earliest holder, not the longest": (
        [("a", (1, 2)), ("b", (1, 2, 3, 4)), ("c", (1, 2, 3, 5))],
        [(0, -1, 0, -1), (2, 0, 2, 0), (3, 1, 3, 1)],
    ),
    "empty prompt": ([("a", (1,)), ("b", ())], [(0, -1, 0, -1), (0, -1, 0, -1)]),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("mask", [None, 0x1])
def test_worked_cases(kernels, name, mask):
    prompts, want = CASES[name]
    requests = [Request(rid, prompt=p) for rid, p in prompts]
    for make in (_plain(), _fused(kernels)):
        views = _check(requests, make, mask=mask)
        got = list(zip(*(views["any"].__dict__[k].tolist() for k in "ewLp"), strict=True))
        assert got == want


def test_the_query_stops_at_the_prompt_where_the_inserted_sequence_goes_on(kernels):
    requests = [
        Request("a", prompt=(1, 2), output=(3, 4)),
        Request("b", prompt=(1, 2, 3), output=(4, 5)),
    ]
    views = _check(requests, _fused(kernels))
    assert (views["any"].e[1], views["any"].w[1]) == (4, 0)  # into a's output
    assert (views["any"].L[1], views["any"].p[1]) == (3, 0)  # b's prompt is 3 long


def test_collisions_take_the_exact_path_and_count_it(kernels):
    requests = [Request(f"r{i}", prompt=(i % 3, 1, i % 2, 4)) for i in range(8)]
    views = _check(requests, _fused(kernels), mask=0x1)
    assert views["any"].fallbacks > 0
    assert _check(requests, _fused(kernels))["any"].fallbacks == 0


LAYOUT_ERRORS = [
    (np.zeros(3, np.float64), [0, 1], [1, 1], "units must be int32 or int64, not float64"),
    (np.zeros(3, np.int32), [0], [1, 1], "1 starts for 2 requests"),
    (np.zeros(3, np.int32), [0, 2], [1, 2], "a request's units lie outside the array of units"),
    (np.zeros(3, np.int32), [-1, 0], [1, 1], "a request's units lie outside the array of units"),
]


@pytest.mark.parametrize(("flat", "starts", "lens", "message"), LAYOUT_ERRORS)
def test_the_layout_is_checked_before_any_kernel_reads_it(flat, starts, lens, message):
    meta = MemorySource.from_requests(
        [Request(f"r{i}", prompt=tuple(range(n))) for i, n in enumerate(lens)]
    ).meta
    with pytest.raises(ValueError, match=f"^{message}$"):
        check_layout(meta, flat, np.asarray(starts))


@pytest.mark.parametrize(
    ("units", "free_gib", "want"),
    [(10**6, 80, 1), (10**9, 80, 2), (2 * 10**9, 80, 4), (10**8, 1, 32)],
)
def test_passes_fit_the_free_device_memory(units, free_gib, want):
    assert passes_for(units, free_gib << 30, 4) == want


def test_units_that_do_not_fit_at_all_are_refused():
    with pytest.raises(MemoryError, match="do not fit the device's 1.0 GiB free"):
        passes_for(10**9, 1 << 30, 4)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(requests_(), st.sampled_from([None, 0x7]), st.sampled_from([64, 1 << 20]))
def test_the_device_branch_sizes_its_passes_and_answers_alike(kernels, requests, mask, free_bytes):
    """match_held's CuPy branch on a host device (the kernels built for the host, CuPy's
    spellings over NumPy): a device too small for one sort splits it, the same answers."""
    source = MemorySource.from_requests(requests)
    options = MatchOptions(hash_params=_params(mask))
    device = Device(kernels, lambda: free_bytes + 16 * source.flat.shape[0], np.asarray)
    kernels.launched.clear()
    views = match_held(
        source.meta,
        source.flat,
        source.offsets[:-1],
        xp=_NumPyAsCuPy(np),
        options=options,
        device=device,
    )
    ref = run_matcher(MemorySource.from_requests(requests), xp=np, options=RADIX)
    for field, got in _as_arrays(views, source.meta.n).items():
        assert np.array_equal(got, getattr(ref, field)), field
    if source.flat.shape[0]:
        assert "hpa_element_keys" in kernels.launched


def test_held_sources_and_one_read_sources_answer_alike():
    requests = [Request(f"r{i}", prompt=(1, 2, i)) for i in range(5)]
    memory = MemorySource.from_requests(requests)
    held = PartitionSource(memory.meta, memory.flat, memory.offsets)
    sort = MatchOptions(matcher="sort")
    assert_same_arrays(
        run_matcher(held, xp=np, options=sort), run_matcher(memory, xp=np, options=sort)
    )


def test_an_unknown_matcher_lists_the_known_ones():
    source = MemorySource.from_requests([Request("a", prompt=(1,))])
    with pytest.raises(ValueError, match="unknown matcher 'tree'; known: auto, sort, chunked"):
        run_matcher(source, xp=np, options=MatchOptions(matcher="tree", compiled_min_units=9))


SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
TABLES = ("prefix_matches", "junctions", "junction_requests")


def _tables(db: Path) -> dict:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in TABLES}
    finally:
        con.close()


@pytest.mark.parametrize("sample", ["mixed_hash_ids.jsonl.gz", "groups_1500.jsonl"])
def test_hpa_match_through_the_sort_matcher_stores_the_same_tables(tmp_path, monkeypatch, sample):
    """The whole `hpa match` path (one held read, junction ids from it) on the samples."""
    from analyzer.cli.base import cli

    runner = CliRunner()
    dbs = {name: tmp_path / f"{name}.duckdb" for name in ("radix", "sort")}
    for db in dbs.values():
        res = runner.invoke(cli, ["ingest", "--db", str(db), str(SAMPLES / sample)])
        assert res.exit_code == 0, res.output
    assert runner.invoke(cli, ["match", "--db", str(dbs["radix"])]).exit_code == 0
    monkeypatch.setattr(engine, "_compiled_match", lambda *args, **kwargs: None)
    monkeypatch.setattr(engine, "_takes_sort", lambda xp, options: True)
    allocated = []

    def allocate(size, dtype):  # as the GPU's page-locked allocator is asked
        allocated.append(size)
        return np.empty(size, dtype)

    monkeypatch.setattr(sort_device, "host_allocator", lambda xp: allocate)
    # as on the GPU: the store's source reaches the matcher, which reads it once
    monkeypatch.setattr(DuckDBSource, "holds_better", lambda self: False)
    res = runner.invoke(cli, ["match", "--db", str(dbs["sort"])])
    assert res.exit_code == 0, res.output
    assert len(allocated) == 1  # every id read once, into the array the allocator made
    assert "on the sort matcher (numpy)" in res.output
    assert _tables(dbs["sort"]) == _tables(dbs["radix"])


def test_the_cuda_source_compiles_to_the_kernels_the_steps_launch(kernels, tmp_path):
    """nvcc (where the CUDA toolkit is installed, as on the GPU machines and this CI's
    image) compiles the device side of sort_kernels.cu without a warning, and its entry
    points are exactly the kernels FusedSteps launches."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc: the device side is compiled by CuPy on a GPU machine")
    source = tmp_path / "sort_kernels.cu"
    source.write_text(source_text())
    ptx = tmp_path / "sort_kernels.ptx"
    subprocess.run(
        [nvcc, "-ptx", "-arch=sm_80", "-std=c++14", "-Werror", "all-warnings", "-o", ptx, source],
        check=True,
        capture_output=True,
    )
    entries = set(re.findall(r"\.entry (\w+)\(", ptx.read_text()))
    requests = [Request("a", prompt=(1, 2, 3)), Request("b", prompt=(1, 2, 4))]
    kernels.launched.clear()
    for narrow in (False, True):
        _check(requests, _fused(kernels), narrow=narrow)
    assert entries == set(kernels.launched)
