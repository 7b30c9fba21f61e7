"""`hpa compare`: two windows of one replay run, or two runs of one trace, read from the store
and attributed (`metrics.compare`: what is compared and how)."""

from __future__ import annotations

from pathlib import Path

import orjson

from analyzer.errors import ConfigError
from analyzer.metrics.attribution import ALL
from analyzer.metrics.compare import (
    Comparison,
    SideRows,
    Window,
    assemble,
    check_request,
    fitted_ttft,
    overlap_warning,
    plan_command,
    seconds_text,
)
from analyzer.store.caveats import timestamp_caveats
from analyzer.store.db import DEFAULT_DB, connect, load_sql
from analyzer.store.runs import resolve_run


def compare(
    *,
    db_path: str | Path = DEFAULT_DB,
    window: str | None = None,
    baseline: str | None = None,
    runs: tuple[int, ...] | list[int] = (),
) -> Comparison:
    """Compare two windows of one run (`window` vs `baseline`, `runs` = () or (RUN,)) or
    two runs (`runs` = (A, B), A the baseline).

    Raises:
        ConfigError: a bad combination of arguments, a bad or empty window, an unknown run,
            or two runs of different traces. StoreError: no database or no replay run.
    """
    runs = tuple(runs)
    windowed, win_cur, win_base = check_request(window, baseline, runs)
    con = connect(db_path, create=False, reader=True)
    try:
        if windowed:
            run_id = resolve_run(con, runs[0] if runs else None)
            _check_windows(con, run_id, (win_base, win_cur))
            sides = [("baseline", run_id, win_base), ("current", run_id, win_cur)]
            fit_run = run_id
            warnings = tuple(w for w in [overlap_warning(win_cur, win_base)] if w)
        else:
            a, b = (resolve_run(con, r) for r in runs)
            _check_same_trace(con, a, b)
            warnings = _same_run_warnings(con, a, b)
            sides = [("baseline", a, None), ("current", b, None)]
            fit_run = a
        base, cur = (
            SideRows(name, run_id, w, _side_rows(con, run_id, w), _traffic(con, run_id, w))
            for name, run_id, w in sides
        )
        ttft = _ttft_model(con, fit_run)
        fit_model = _policy(con, fit_run).get("model")
        notes = tuple(timestamp_caveats(con)) if windowed else ()
        run_policy = _policy(con, cur.run_id)
        model = run_policy.get("model")
        w = cur.window
        replayed = con.execute(
            load_sql("compare_replayed_tokens"),
            {"windowed": w is not None, "end": w.end_s if w else 0.0},
        )
        cheap = replayed.fetchone()[0] <= PLAN_INLINE_TOKENS
    finally:
        con.close()
    overrides = plan_overrides(run_policy)
    plan = plan_command(str(db_path), model, cur.window, tuple(f"{k}={v}" for k, v in overrides))
    pool = _pool_answer(db_path, model, cur.window, overrides) if cheap else None
    return assemble(base, cur, ttft, fit_run, notes, warnings, plan, pool, fit_model)


# The eviction lever's plan is run by compare itself, its answer in the sentence, when it
# replays at most this many prompt tokens (the requests up to the window's end): a plan
# replays the trace some 50 to 200 times (about 1 s at 100,000 tokens, 13 s at 3.6 M).
PLAN_INLINE_TOKENS = 1_000_000


# Keys a plan sets itself (the pool it searches, the model it is given), never carried over.
PLANNED_KEYS = ("num_blocks", "model")


def plan_overrides(run_policy: dict) -> list[tuple[str, str]]:
    """The run's policy keys that a plan of its model would not take by default, as
    (key, value as `--set` reads it): the printed plan sizes the incident's configuration
    (its engine, schedule, retention, ...), not the default one."""
    from analyzer.sim.dispatch import load_policy

    model = run_policy.get("model")
    # without a model the plan needs the block size given, as the run had it
    seed = [f"model={model}"] if model else [f"block_size={run_policy['block_size']}"]
    schedule = run_policy.get("schedule", "serial")  # its keys against their defaults
    default = orjson.loads(load_policy(None, [*seed, f"schedule={schedule}"]).to_json())
    out = [] if model else [("block_size", str(run_policy["block_size"]))]
    if schedule != "serial":
        out.append(("schedule", schedule))
    for key, value in run_policy.items():
        if key in (*PLANNED_KEYS, "schedule") or default.get(key, object()) == value:
            continue
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
        out.append((key, text))
    return out


def _pool_answer(db_path, model: str | None, window: Window | None, overrides=()):
    """pool(target): the plan's cheapest setting in words ('42 blocks, 0.52 GiB a cache'),
    or why there is none (the plan of the run's configuration: `overrides`)."""
    from analyzer.config.policy import policy_values

    values = policy_values(None, [f"{k}={v}" for k, v in overrides]) if overrides else None

    def pool(target: float) -> str:
        from analyzer.pipeline.plan import plan

        window_text = window.text if window else None
        r = plan(target, db_path=db_path, model=model, window=window_text, policy=values)
        best = r.best
        if not r.reachable or best is None or best.num_blocks is None:
            return "unreachable: " + r.message
        size = f"{best.num_blocks:,} blocks"
        if best.memory_gib is not None:
            size += f", {best.memory_gib:,.2f} GiB a cache"
        return f"{size}: {best.useful_hit_ratio:.3f} by its replays"

    return pool


def _policy(con, run_id: int) -> dict:
    return orjson.loads(
        con.execute(load_sql("replay_run_policy"), {"run_id": run_id}).fetchone()[0]
    )


def _same_run_warnings(con, a: int, b: int) -> tuple[str, ...]:
    """A warning when the two runs are one (the same run, or two replays of the trace with
    the same policy, measured part and hpa version: nothing can differ between them), or
    when they count different requests (their --measure-from)."""
    if a == b:
        return (f"run {a} is compared with itself: nothing can differ",)
    (pa_, *ra), (pb, *rb) = (
        con.execute(load_sql("compare_run_identity"), {"run_id": r}).fetchone() for r in (a, b)
    )
    if orjson.loads(pa_) == orjson.loads(pb) and ra == rb:
        return (
            f"runs {a} and {b} replayed the same trace with the same policy: they are one "
            "replay, nothing can differ",
        )
    if ra[0] != rb[0]:  # measure_from: the sides count different requests
        return (
            f"runs {a} and {b} count different requests (--measure-from {ra[0]:g} and "
            f"{rb[0]:g}): the change mixes the requests each leaves out with what the runs "
            "replayed differently",
        )
    return ()


def _check_windows(con, run_id: int, windows) -> None:
    total, stamped, lo, hi, measure_from = con.execute(
        load_sql("compare_run_span"), {"run_id": run_id}
    ).fetchone()
    if stamped == 0:
        raise ConfigError(
            f"run {run_id}'s requests have no timestamps, so windows select nothing; "
            "compare two runs with --run A --run B instead"
        )
    for w in windows:
        params = {"run_id": run_id, "start": w.start_s, "end": w.end_s}
        n = con.execute(load_sql("compare_window_count"), params).fetchone()[0]
        if n == 0:
            span = f"{seconds_text(lo)}..{seconds_text(hi)} s"
            if measure_from:  # the warm-up requests are not counted: name what is
                raise ConfigError(
                    f"window {w.text} holds no measured requests of run {run_id} "
                    f"(--measure-from {measure_from:g}: its measured requests' timestamps "
                    f"span {span})"
                )
            raise ConfigError(
                f"window {w.text} holds no requests of run {run_id} (its timestamps span {span})"
            )


def _check_same_trace(con, a: int, b: int) -> None:
    found = dict(con.execute(load_sql("compare_fingerprints"), {"a": a, "b": b}).fetchall())
    if found[a] != found[b]:
        raise ConfigError(
            f"runs {a} and {b} replayed different traces (fingerprints {found[a][:12]} and "
            f"{found[b][:12]}); compare two runs of the same trace, or two windows of one run"
        )


def _params(run_id: int, w: Window | None) -> dict:
    return {
        "run_id": run_id,
        "windowed": w is not None,
        "start": w.start_s if w else 0.0,
        "end": w.end_s if w else 0.0,
    }


def _traffic(con, run_id: int, w: Window | None) -> dict:
    cur = con.execute(load_sql("compare_traffic"), _params(run_id, w))
    out = dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))
    span = out["span_s"]
    out["requests_per_s"] = out["requests"] / span if span else None
    return out


def _side_rows(con, run_id: int, w: Window | None) -> dict[tuple[str, str], dict]:
    cur = con.execute(load_sql("compare_side"), _params(run_id, w))
    names = [d[0] for d in cur.description]
    out = {}
    for row in cur.fetchall():
        r = dict(zip(names, row, strict=True))
        out[(r.pop("prompt_family"), r.pop("model_revision"))] = r
    return out


def _ttft_model(con, run_id: int):
    """The TTFT fits of run `run_id` (`metrics.compare.fitted_ttft`) from what it stored."""
    points = con.execute(load_sql("compare_ttft_points"), {"run_id": run_id}).fetchall()
    params = {"run_id": run_id}
    policy = _policy(con, run_id)
    revisions = [r[0] for r in con.execute(load_sql("compare_revisions"), params).fetchall()]
    return fitted_ttft(points, policy.get("model"), revisions)


def largest_families(groups, causes, most: int):
    """(groups, causes, hidden rows, their queried tokens) of a comparison's tables as a
    command prints them: the `most` families with the most queried tokens over both sides
    (ties by name) and the "(all)" roll-ups; (groups, causes, 0, 0) where none is left out."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sizes: dict[str, int] = {}
    rows: dict[str, int] = {}
    for r in groups.to_pylist():
        if r["prompt_family"] == ALL or r["model_revision"] == ALL:
            continue  # a roll-up: its members are counted
        tokens = (r["baseline_prompt_tokens"] or 0) + (r["current_prompt_tokens"] or 0)
        sizes[r["prompt_family"]] = sizes.get(r["prompt_family"], 0) + tokens
        rows[r["prompt_family"]] = rows.get(r["prompt_family"], 0) + 1
    if len(sizes) <= most:
        return groups, causes, 0, 0
    ranked = sorted(sizes, key=lambda f: (-sizes[f], f))
    kept = pa.array([*ranked[:most], ALL])
    left = ranked[most:]
    return (
        groups.filter(pc.is_in(groups["prompt_family"], kept)),
        causes.filter(pc.is_in(causes["prompt_family"], kept)),
        sum(rows[f] for f in left),
        sum(sizes[f] for f in left),
    )
