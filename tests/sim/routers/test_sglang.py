"""sglang cache_aware: sgl-router policies/cache_aware.rs and tree.rs, in block units."""

from __future__ import annotations

from analyzer.sim.routers.base import Ties
from analyzer.sim.routers.sglang import SglangRouter, Tree
from tests.sim.routers.conftest import chain, idle, req


def text(s: str) -> tuple:
    """A string's characters as units (the upstream tests use strings)."""
    return tuple(s)


def router(n: int, **knobs) -> SglangRouter:
    return SglangRouter(n, knobs, Ties(None))


def test_tree_exact_match_seq():
    # tree.rs test_exact_match_seq
    tree = Tree()
    for s, t in [("hello", 1), ("apple", 2), ("banana", 3)]:
        tree.insert(text(s), t)
    for s, t in [("hello", 1), ("apple", 2), ("banana", 3)]:
        assert tree.prefix_match(text(s)) == (len(s), t)


def test_tree_cold_start():
    # tree.rs test_cold_start: nothing matches, no tenant
    assert Tree().prefix_match(text("hello")) == (0, None)


def test_tree_partial_match():
    # tree.rs test_partial_match_concurrent: "apple", "apabc", "acbdeds" for one tenant
    tree = Tree()
    for s in ("apple", "apabc", "acbdeds"):
        tree.insert(text(s), 0)
    for s in ("apple", "apabc", "acbdeds"):
        assert tree.prefix_match(text(s)) == (len(s), 0)
    assert tree.prefix_match(text("apz")) == (2, 0)  # a partial edge counts


def test_tree_smallest_tenant():
    # tree.rs test_get_smallest_tenant
    tree = Tree()
    assert tree.smallest_tenant() is None
    tree.insert(text("ap"), 1)
    tree.insert(text("icot"), 1)
    tree.insert(text("cat"), 2)
    assert tree.smallest_tenant() == 2
    tree.insert(text("do"), 3)
    tree.insert(text("hi"), 4)
    assert tree.smallest_tenant() == 3  # 3 and 4 tie at 2: the lowest index here
    tree.insert(text("hello"), 4)
    assert tree.smallest_tenant() == 3


def used_sizes(tree: Tree) -> dict[int, int]:
    """get_used_size_per_tenant: the sizes recomputed by walking the tree."""
    sizes: dict[int, int] = {}
    stack = [tree.root]
    while stack:
        node = stack.pop()
        for t in node.tenants:
            sizes[t] = sizes.get(t, 0) + len(node.text)
        stack.extend(node.children.values())
    return sizes


def test_tree_tenant_char_count():
    # tree.rs test_tenant_char_count: the maintained counts equal the recomputed ones
    tree = Tree()
    phases = [
        [("apple", 1), ("apricot", 1), ("banana", 1), ("amplify", 2), ("application", 2)],
        [("apartment", 1), ("appetite", 2), ("ball", 1), ("box", 2)],
        [("zebra", 1), ("zebra", 2), ("zero", 1), ("zero", 2)],
    ]
    for phase in phases:
        for s, t in phase:
            tree.insert(text(s), t)
        assert tree.size == used_sizes(tree)
    tree.evict(10)
    assert tree.size == used_sizes(tree)
    assert all(size <= 10 for size in tree.size.values())


def test_eviction_drops_least_recent_leaves_first():
    tree = Tree()
    tree.insert(text("aaaa"), 0)
    tree.insert(text("bbbb"), 0)
    tree.insert(text("cccc"), 0)
    tree.prefix_match(text("aaaa"))  # refresh "aaaa"
    tree.evict(8)
    assert tree.prefix_match(text("bbbb"))[0] == 0  # the oldest leaf went
    assert tree.prefix_match(text("aaaa"))[0] == 4
    assert tree.size[0] == 8


def test_balanced_load_follows_the_cache():
    # cache_aware.rs test_cache_aware_with_balanced_load: the same prompt, then its prefix,
    # go where the first went
    r = router(2)
    prompt = chain(0, 11)
    first = r.route(req(0, prompt), idle(2))
    assert r.route(req(1, prompt), idle(2)) == first
    assert r.route(req(2, prompt[:5]), idle(2)) == first


def test_imbalanced_load_goes_to_the_shortest_queue():
    # cache_aware.rs test_cache_aware_with_imbalanced_load: cache_threshold 0.5, abs 5,
    # rel 2.0; worker 1 has 20 in flight, worker 2 none -> worker 2, every time
    r = router(
        2,
        sglang_router_cache_threshold=0.5,
        sglang_router_balance_abs=5,
        sglang_router_balance_rel=2.0,
        sglang_router_eviction_interval_s=0,
        sglang_router_max_tree_size=10_000,
    )
    r.load = [20, 0]
    assert [r.route(req(i, text("test")), idle(2)) for i in range(5)] == [1] * 5


def test_cache_miss_goes_to_the_smallest_tree_even_if_overloaded():
    # cache_aware.rs test_prove_cache_aware_overload_flaw: threshold 0.5, abs 100, rel 10;
    # the overloaded worker (load 50) holds 5 units, the idle one 1000: a miss goes to
    # the smaller tree
    r = router(
        2,
        sglang_router_cache_threshold=0.5,
        sglang_router_balance_abs=100,
        sglang_router_balance_rel=10.0,
        sglang_router_eviction_interval_s=0,
        sglang_router_max_tree_size=1_000_000,
    )
    r.load = [50, 0]
    r.tree.insert(chain(10_000, 5), 0)
    r.tree.insert(chain(20_000, 1000), 1)
    assert r.route(req(0, chain(30_000, 17)), idle(2)) == 0


def test_match_rate_threshold():
    r = router(2)  # CLI default threshold 0.3
    r.tree.insert(chain(0, 3), 1)
    r.tree.insert(chain(100, 2), 0)
    # 3 of 10 blocks match on worker 1: 0.3 is not > 0.3 -> the smallest tree (worker 0)
    assert r.route(req(0, chain(0, 3) + chain(500, 7)), idle(2)) == 0
    # 4 of 10 -> worker 1 (the tree now holds 0..2 on both; 0..3 only on 1)
    r2 = router(2)
    r2.tree.insert(chain(0, 4), 1)
    assert r2.route(req(0, chain(0, 4) + chain(500, 6)), idle(2)) == 1


def test_periodic_eviction_on_simulated_time():
    r = router(1, sglang_router_eviction_interval_s=10.0, sglang_router_max_tree_size=4)
    r.route(req(0, chain(0, 6), arrival_s=0.0), idle(1))
    r.route(req(1, chain(100, 6), arrival_s=5.0), idle(1))
    assert r.tree.size[0] == 12
    r.route(req(2, chain(200, 2), arrival_s=10.0), idle(1))  # evicts before routing
    assert r.tree.size[0] == 2  # both 6-unit leaves went, then 2 units joined
