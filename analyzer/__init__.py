"""hybrid-prefix-analyzer: offline prefix-cache analysis for hybrid LLMs.

Each CLI command is a thin wrapper over one of these functions.
"""

from analyzer.demo import run_demo
from analyzer.errors import (
    AnalyzerError,
    BackendUnavailable,
    ConfigError,
    InputFileError,
    StoreError,
)
from analyzer.prefixes.api import match_prefixes
from analyzer.replay import run_replay
from analyzer.sim.policy import load_policy, make_policy
from analyzer.store.ingest import ingest
from analyzer.store.query import run_query, stored_summary
from analyzer.traces.synth import generate, write_jsonl

__version__ = "0.1.0"

__all__ = [
    "AnalyzerError",
    "BackendUnavailable",
    "ConfigError",
    "InputFileError",
    "StoreError",
    "generate",
    "ingest",
    "load_policy",
    "make_policy",
    "match_prefixes",
    "run_demo",
    "run_query",
    "run_replay",
    "stored_summary",
    "write_jsonl",
]
