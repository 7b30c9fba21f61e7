"""The wiring layer: one driver per command, each the library call its CLI command makes.

    match_prefixes(db_path, ...)          hpa match     analyzer.pipeline.match
    run_replay(policy, db_path=...)       hpa replay    analyzer.pipeline.replay
    run_sweeps(source, overrides, ...)    hpa sweep     analyzer.pipeline.sweep
    plan(target, model=..., ...)          hpa plan      analyzer.pipeline.plan
    write_probe(policy, out_dir)          hpa probe     analyzer.pipeline.probe
    run_demo(out_dir)                     hpa demo      analyzer.pipeline.demo

Every driver reads its requests through `access.inputs` (the store's `requests` table or a
Parquet dataset) and holds them as a `access.trace.Trace` (loaded whole, or a dataset's
scalar columns with workers reading their own rows); the pure stages below (prefixes, sim,
metrics) never see which. Import each driver from its module, so importing one command's
driver does not load the others' (`analyzer/__init__.py` offers the main ones lazily as
`analyzer.run_replay`, `analyzer.match_prefixes`, ...).
"""
