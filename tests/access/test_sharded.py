"""The matcher sharded by each request's first K units (analyzer.prefixes.shallow) gives
exactly the whole pass's answers, junctions and paths: random traces where every prompt
starts with the same BOS token and shares system prompts ending around depth K (K-1, K,
K+1), with short prompts, outputs, hash-id requests, namespaces, replicas and
conversations. In memory, through the production pieces (shallow pass, shards, merge);
the store/CLI paths under the processes and Ray executors are in test_executors*.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.access.sharded import plan_shards, shared_units
from analyzer.executors import ExecutorSpec
from analyzer.prefixes import result as api
from analyzer.prefixes.engine import MatchOptions, run_matcher
from analyzer.prefixes.memory import MemorySource, Request
from analyzer.prefixes.merge import merge_junctions
from analyzer.prefixes.shallow import group_roots, truncate, unit_limits
from analyzer.prefixes.sharding import match_local, merged_answers
from analyzer.prefixes.source import PartitionSource, take_sequences

BOS = 7
TOKENS = st.integers(0, 2)  # a tiny vocabulary: prefixes are shared and cut everywhere
ANSWERS = ("shared_any", "parent", "shared_replica", "shared_conversation")
INSERT = ("insert_shared", "insert_parent")


@st.composite
def traces(draw, max_requests: int = 30) -> tuple[int, list[Request]]:
    """(K in tokens, requests): system prompts of about K units after a common BOS."""
    k = draw(st.integers(1, 9))
    block = draw(st.sampled_from([2, 3]))
    k_blocks = -(-k // block)
    systems = {
        False: [_units(draw, k + d - 1) for d in (-1, 0, 1)] + [_units(draw, 2 * k)],
        True: [_units(draw, k_blocks + d - 1) for d in (-1, 0, 1)],
    }
    out = []
    for i in range(draw(st.integers(1, max_requests))):
        is_hash = draw(st.integers(0, 4)) == 0
        system = draw(st.sampled_from(systems[is_hash]))
        shape = draw(st.sampled_from(["short", "system", "system", "cut", "repeat"]))
        if shape == "repeat" and out:
            earlier = draw(st.sampled_from(out))
            seq, is_hash = earlier.query, earlier.is_hash
        elif shape == "short":
            seq = (BOS, *draw(st.lists(TOKENS, max_size=max(0, k - 2))))
        else:
            head = system if shape == "system" else system[: draw(st.integers(0, len(system)))]
            seq = (BOS, *head, *draw(st.lists(TOKENS, max_size=4)))
        common = {
            "request_id": f"r{i}",
            "cache_salt": draw(st.sampled_from([None, None, None, "s1"])),
            "lora_name": draw(st.sampled_from([None, None, None, None, "l1"])),
            "replica": draw(st.sampled_from([None, "a", "b"])),
            "conversation_id": draw(st.sampled_from([None, "c1", "c2"])),
        }
        if is_hash:
            out.append(Request(block_hash_ids=seq, block_size=block, **common))
        else:
            output = tuple(draw(st.lists(TOKENS, max_size=3))) if draw(st.booleans()) else None
            out.append(Request(prompt=seq, output=output, **common))
    return k, out


def _units(draw, n: int) -> tuple[int, ...]:
    return tuple(draw(st.lists(TOKENS, min_size=max(0, n), max_size=max(0, n))))


def sharded(source: MemorySource, k: int, workers: int, options: MatchOptions):
    """The sharded match of `match_sharded`, its workers' reads replaced by `source`."""
    meta = source.meta
    spec = ExecutorSpec("processes", workers=workers, shard_tokens=k)
    limit, items, _ = plan_shards(
        meta, (source.flat, source.offsets), spec, options, junctions=True
    )
    parts = [items[0].run()]
    for task in items[1:]:
        flat, offsets = take_sequences(source.flat, source.offsets, task.ids)
        parts.append(match_local(PartitionSource(task.meta, flat, offsets), task))
    return merged_answers(meta.n, limit, parts), merge_junctions(parts)


def whole(source: MemorySource, options: MatchOptions):
    result = api.compute(source, xp=np, options=options)
    return result, api.node_rows(source, result)


def paths(requests: np.ndarray, junctions: np.ndarray) -> list[tuple[int, int]]:
    return sorted(zip(requests.tolist(), junctions.tolist(), strict=True))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), st.integers(1, 2), st.sampled_from([None, 3]))
def test_k_sharded_match_equals_the_whole_pass(trace, workers, chunk_requests):
    k, requests = trace
    source = MemorySource.from_requests(requests)
    options = MatchOptions(chunk_requests=chunk_requests)
    ref, ref_nodes = whole(source, options)
    arrays, (junctions, path_req, path_j, ids) = sharded(source, k, workers, options)
    for name in ANSWERS + INSERT:
        assert getattr(arrays, name).tolist() == getattr(ref.arrays, name).tolist(), name
    nodes = api.nodes_table(source.meta, junctions, ids)
    assert nodes.to_pylist() == ref_nodes.to_pylist()  # ids, positions, counts, labels
    assert paths(path_req, path_j) == paths(ref.path_requests, ref.path_junctions)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_k_sharded_replay_levels_equal_the_whole_pass(trace):
    k, requests = trace
    source = MemorySource.from_requests(requests)
    ref = run_matcher(source, xp=np, options=MatchOptions())
    spec = ExecutorSpec("local", shard_tokens=k)  # shared_units runs the K path on any spec
    got = shared_units(source.meta, source.flat, source.offsets, spec)
    for name in ANSWERS + INSERT:
        assert getattr(got, name).tolist() == getattr(ref, name).tolist(), name


def test_the_boundary_k_minus_one_k_k_plus_one():
    """Three system prompts ending at K-1, K and K+1 units after BOS, each shared, plus a
    short prompt that is a prefix of all: junctions at K-1, K, K+1 all found once."""
    k = 4
    stems = [(BOS, 1, 1), (BOS, 1, 1, 2), (BOS, 1, 1, 2, 2)]  # lengths K-1, K, K+1
    requests = []
    for i, stem in enumerate(stems * 2):
        requests.append(Request(request_id=f"r{i}", prompt=(*stem, 5 + i // 3, 9)))
    requests.append(Request(request_id="short", prompt=(BOS, 1)))
    source = MemorySource.from_requests(requests)
    ref, ref_nodes = whole(source, MatchOptions())
    arrays, (junctions, path_req, path_j, ids) = sharded(source, k, 2, MatchOptions())
    assert arrays.shared_any.tolist() == ref.arrays.shared_any.tolist()
    assert arrays.parent.tolist() == ref.arrays.parent.tolist()
    nodes = api.nodes_table(source.meta, junctions, ids).to_pylist()
    assert nodes == ref_nodes.to_pylist()
    assert sorted(n["position_tokens"] for n in nodes) == [k - 1, k, k + 1]
    assert paths(path_req, path_j) == paths(ref.path_requests, ref.path_junctions)


def test_groups_split_a_common_bos_and_k_counts_whole_blocks():
    requests = [Request(request_id=f"r{i}", prompt=(BOS, i % 3, 5, 5, 5, i)) for i in range(9)]
    requests.append(Request(request_id="h", block_hash_ids=(BOS, 1, 2), block_size=16))
    requests.append(Request(request_id="short", prompt=(BOS, 0, 5)))
    meta = MemorySource.from_requests(requests).meta
    source = MemorySource.from_requests(requests)
    limit = unit_limits(meta.block_size, 4)
    assert limit.tolist() == [4] * 9 + [1, 4]
    roots = group_roots(meta.ns_any, source.flat, source.offsets, limit)
    assert roots[:9].tolist() == [0, 1, 2] * 3  # one BOS, three groups: three shards
    assert roots[9:].tolist() == [-1, -1]  # alone in its group; shorter than K
    assert unit_limits(np.asarray([0, 16, 3]), 33).tolist() == [33, 3, 11]
    flat, offsets = truncate(np.arange(10), np.asarray([0, 4, 4, 10]), np.asarray([2, 5, 3]))
    assert flat.tolist() == [0, 1, 4, 5, 6] and offsets.tolist() == [0, 2, 2, 5]


def test_colliding_group_keys_merge_groups_and_answers_stay_exact(monkeypatch):
    """Group keys are hashes: force keys to collide (a 1-bit key) and the groups merge into
    fewer shards, with the same answers."""
    import analyzer.prefixes.shallow as shallow
    from analyzer.prefixes.prefix_hash import DEFAULT_HASH

    requests = [Request(request_id=f"r{i}", prompt=(BOS, i % 4, 1, 2, i % 3)) for i in range(16)]
    source = MemorySource.from_requests(requests)
    limit = unit_limits(source.meta.block_size, 3)
    exact = group_roots(source.meta.ns_any, source.flat, source.offsets, limit)
    monkeypatch.setattr(shallow, "DEFAULT_HASH", replace(DEFAULT_HASH, key_mask=1))
    merged = group_roots(source.meta.ns_any, source.flat, source.offsets, limit)
    ref, ref_nodes = whole(source, MatchOptions())
    arrays, (junctions, _, _, ids) = sharded(source, 3, 2, MatchOptions())
    assert len(set(exact.tolist())) == 4 and len(set(merged.tolist())) <= 2
    assert arrays.shared_any.tolist() == ref.arrays.shared_any.tolist()
    assert arrays.parent.tolist() == ref.arrays.parent.tolist()
    assert api.nodes_table(source.meta, junctions, ids).to_pylist() == ref_nodes.to_pylist()


@pytest.mark.parametrize("bad", [0, -3, True, 2.5])
def test_shard_tokens_must_be_a_positive_integer(bad):
    from analyzer.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^--shard-tokens .*: expected an integer >= 1$"):
        ExecutorSpec("processes", shard_tokens=bad)
