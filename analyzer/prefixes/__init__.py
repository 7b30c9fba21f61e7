"""Prefix matching (pure): longest shared prefixes per request and the junctions of the
prefix tree, on NumPy or CuPy (`backend.py`), with exact sharding by each request's first
K units (`shallow.py`, `sharding.py`, `merge.py`).

`result.compute` matches any `SequenceSource` without a database; `trie.trie_match` is the
plain reference. `hpa match` itself is `analyzer.pipeline.match.match_prefixes`.
"""
