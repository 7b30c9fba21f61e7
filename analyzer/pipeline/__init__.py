"""The wiring layer: one driver per command, each the library call its CLI command makes.

    match_prefixes(db_path, ...)          hpa match     analyzer.pipeline.match
    run_replay(policy, db_path=...)       hpa replay    analyzer.pipeline.replay
    run_sweeps(source, overrides, ...)    hpa sweep     analyzer.pipeline.sweep
    plan(target, model=..., ...)          hpa plan      analyzer.pipeline.plan
    write_probe(policy, out_dir)          hpa probe     analyzer.pipeline.probe
    run_demo(out_dir)                     hpa demo      analyzer.pipeline.demo

Every driver reads its requests through `pipeline.inputs` (the store's `requests` table or a
Parquet dataset) and holds them as a `pipeline.trace.Trace` (loaded whole, or a dataset's
scalar columns with workers reading their own rows); the pure stages below (prefixes, sim,
metrics) never see which. The drivers are imported on first use, so importing one command's
driver does not load the others'. (`plan` is reached as `analyzer.pipeline.plan.plan`:
the package attribute `plan` is its module.)
"""

from importlib import import_module

_DRIVERS = {
    "match_prefixes": "analyzer.pipeline.match",
    "run_replay": "analyzer.pipeline.replay",
    "run_sweeps": "analyzer.pipeline.sweep",
    "write_probe": "analyzer.pipeline.probe",
    "run_demo": "analyzer.pipeline.demo",
}

__all__ = list(_DRIVERS)


def __getattr__(name: str):
    if name in _DRIVERS:
        return getattr(import_module(_DRIVERS[name]), name)
    raise AttributeError(f"module 'analyzer.pipeline' has no attribute {name!r}")
