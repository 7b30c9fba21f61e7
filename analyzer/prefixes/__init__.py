"""Prefix matching: longest shared prefixes per request and the junctions of the prefix tree.

`match_prefixes` is what `hpa match` runs; `compute` does the same on any
`SequenceSource` without a database; `trie.trie_match` is the plain reference.
"""

from analyzer.prefixes.api import MatchSummary, compute, match_prefixes
from analyzer.prefixes.engine import MatchOptions

__all__ = ["MatchOptions", "MatchSummary", "compute", "match_prefixes"]
