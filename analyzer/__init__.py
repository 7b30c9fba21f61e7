"""hybrid-prefix-analyzer: offline prefix-cache analysis for hybrid LLMs.

Each CLI command is a thin wrapper over one of these functions. They are imported on
first use, so `import analyzer.prefixes` (e.g. on a GPU machine) does not pull in the
report's or the store's dependencies.
"""

from importlib import import_module

from analyzer.errors import (
    AnalyzerError,
    BackendUnavailable,
    ConfigError,
    InputFileError,
    StoreError,
)

__version__ = "0.1.0"

_LAZY = {
    "generate": "analyzer.traces.synth",
    "write_jsonl": "analyzer.traces.synth",
    "ingest": "analyzer.store.ingest",
    "run_query": "analyzer.store.query",
    "stored_summary": "analyzer.store.query",
    "match_prefixes": "analyzer.pipeline.match",
    "load_policy": "analyzer.sim.dispatch",
    "make_policy": "analyzer.sim.dispatch",
    "run_replay": "analyzer.pipeline.replay",
    "run_demo": "analyzer.pipeline.demo",
    "validate": "analyzer.pipeline.validate",
    "write_probe": "analyzer.pipeline.probe",
}

__all__ = [
    "AnalyzerError",
    "BackendUnavailable",
    "ConfigError",
    "InputFileError",
    "StoreError",
    *_LAZY,
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'analyzer' has no attribute {name!r}")
