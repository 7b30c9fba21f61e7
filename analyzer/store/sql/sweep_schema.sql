-- Tables written by `hpa sweep`: one row per sweep (one knob, or a grid), one per point.
-- Each point is a normal replay run (replay_runs.run_id).
CREATE TABLE IF NOT EXISTS sweeps (
    sweep_id INTEGER PRIMARY KEY,
    base_policy JSON NOT NULL,
    knob VARCHAR NOT NULL,
    created_at TIMESTAMP NOT NULL
);
-- What the user called the sweep (`--name`); its points are runs named "NAME · VALUE".
ALTER TABLE sweeps ADD COLUMN IF NOT EXISTS name VARCHAR;

CREATE TABLE IF NOT EXISTS sweep_points (
    sweep_id INTEGER NOT NULL,
    knob VARCHAR NOT NULL,
    value VARCHAR NOT NULL,
    run_id INTEGER NOT NULL,
    prompt_tokens BIGINT NOT NULL,
    hit_tokens BIGINT NOT NULL,
    sparse_retention_miss_tokens BIGINT NOT NULL,
    useful_hit_ratio DOUBLE,
    sparse_loss_ratio DOUBLE,
    memory_gib DOUBLE
);
