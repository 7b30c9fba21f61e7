-- Tables written by `hpa replay`: one run per policy, one row per request per run.
CREATE TABLE IF NOT EXISTS replay_runs (
    run_id INTEGER PRIMARY KEY,
    policy JSON NOT NULL,
    trace_fingerprint VARCHAR NOT NULL,
    num_requests BIGINT NOT NULL,
    prompt_tokens BIGINT NOT NULL,
    hit_tokens BIGINT NOT NULL,
    replay_seconds DOUBLE NOT NULL,
    created_at TIMESTAMP NOT NULL,
    hpa_version VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS replay_requests (
    run_id INTEGER NOT NULL,
    arrival_seq BIGINT NOT NULL,
    request_id VARCHAR NOT NULL,
    prompt_family VARCHAR,
    model_revision VARCHAR,
    replica VARCHAR NOT NULL,
    timestamp_s DOUBLE,
    prompt_tokens BIGINT NOT NULL,
    shared_any_tokens BIGINT NOT NULL,
    shared_replica_tokens BIGINT NOT NULL,
    matchable_tokens BIGINT NOT NULL,
    attention_match_tokens BIGINT NOT NULL,
    hit_tokens BIGINT NOT NULL,
    sparse_retention_miss_tokens BIGINT NOT NULL,
    sparse_retention_miss_never_kept_tokens BIGINT NOT NULL,
    sparse_retention_miss_evicted_tokens BIGINT NOT NULL,
    junction_tokens BIGINT NOT NULL,
    fresh_prefill_tokens BIGINT NOT NULL,
    unshared_tokens BIGINT NOT NULL,
    lost_routing_tokens BIGINT NOT NULL,
    lost_granularity_tokens BIGINT NOT NULL,
    lost_eviction_tokens BIGINT NOT NULL,
    lost_spec_decode_tokens BIGINT NOT NULL,
    error VARCHAR
);

-- --measure-from (warm-up exclusion): added later, so older databases gain the columns.
ALTER TABLE replay_runs ADD COLUMN IF NOT EXISTS measure_from DOUBLE DEFAULT 0;
-- What the user called the run (`--name`); NULL: the report names it by engine and policy.
ALTER TABLE replay_runs ADD COLUMN IF NOT EXISTS name VARCHAR;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS measured BOOLEAN DEFAULT true;

CREATE TABLE IF NOT EXISTS replay_summary (
    run_id INTEGER NOT NULL,
    prompt_family VARCHAR NOT NULL,
    model_revision VARCHAR NOT NULL,
    num_requests BIGINT NOT NULL,
    prompt_tokens BIGINT NOT NULL,
    hit_tokens BIGINT NOT NULL,
    sparse_retention_miss_tokens BIGINT NOT NULL,
    sparse_retention_miss_never_kept_tokens BIGINT NOT NULL,
    sparse_retention_miss_evicted_tokens BIGINT NOT NULL,
    unshared_tokens BIGINT NOT NULL,
    lost_routing_tokens BIGINT NOT NULL,
    lost_granularity_tokens BIGINT NOT NULL,
    lost_eviction_tokens BIGINT NOT NULL,
    lost_spec_decode_tokens BIGINT NOT NULL,
    fresh_prefill_tokens BIGINT NOT NULL,
    useful_hit_ratio DOUBLE NOT NULL,
    sparse_loss_ratio DOUBLE NOT NULL,
    hit_plus_sparse_miss_ratio DOUBLE NOT NULL,
    mean_request_hit_ratio DOUBLE NOT NULL,
    p50_request_hit_ratio DOUBLE NOT NULL,
    p90_request_hit_ratio DOUBLE NOT NULL
);

-- Replay designs (docs/definitions.md#other-designs): recomputed tokens, part of the sparse miss, never hits.
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS replay_tokens BIGINT DEFAULT 0;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS replay_tokens BIGINT DEFAULT 0;
-- An engine's note on the request where one of its own choices took effect (rarely set).
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS note VARCHAR;
-- The concurrent schedule (docs/definitions.md#the-concurrent-schedule): simulated times in seconds (NULL for a serial run),
-- preemptions, hits over every admission and tokens recomputed after preemptions.
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS arrival_s DOUBLE;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS first_scheduled_s DOUBLE;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS first_token_s DOUBLE;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS finished_s DOUBLE;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS queue_s DOUBLE;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS ttft_s DOUBLE;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS num_preemptions BIGINT DEFAULT 0;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS hit_total_tokens BIGINT;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS recomputed_tokens BIGINT DEFAULT 0;
-- Shared prefix still in flight at admission (concurrent schedule; 0 for a serial run).
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS lost_in_flight_tokens BIGINT DEFAULT 0;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS lost_in_flight_tokens BIGINT DEFAULT 0;
-- Pool blocks in use right after a concurrent request's admission (bounded pools).
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS held_blocks BIGINT;
-- A live router's view of the replica it chose, at the request's arrival (NULL when the
-- routing was decided before the replay): waiting and running requests, KV blocks in use.
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS route_waiting BIGINT;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS route_running BIGINT;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS route_kv_blocks_used BIGINT;
-- The concurrent schedule's figures per group (simulated seconds; NULL for a serial run).
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS ttft_p50_s DOUBLE;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS ttft_p90_s DOUBLE;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS ttft_p99_s DOUBLE;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS queue_mean_s DOUBLE;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS num_preemptions BIGINT DEFAULT 0;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS recomputed_tokens BIGINT DEFAULT 0;
-- A host KV tier (docs/definitions.md#the-host-kv-tier): tokens loaded from it beyond the GPU
-- hit (part of hit_tokens), and the engine steps and seconds the request waited for the load.
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS host_hit_tokens BIGINT DEFAULT 0;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS host_wait_steps BIGINT DEFAULT 0;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS host_wait_s DOUBLE;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS host_hit_tokens BIGINT DEFAULT 0;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS host_hit_ratio DOUBLE DEFAULT 0;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS host_waited_requests BIGINT DEFAULT 0;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS host_wait_mean_s DOUBLE;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS host_wait_p99_s DOUBLE;
-- What a host KV tier did not give back beyond its hit: tokens it had stored then evicted,
-- tokens it never stored (decode tokens, unkept sparse boundaries, dropped offers).
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS host_evicted_tokens BIGINT DEFAULT 0;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS host_never_stored_tokens BIGINT DEFAULT 0;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS host_evicted_tokens BIGINT DEFAULT 0;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS host_never_stored_tokens BIGINT DEFAULT 0;
-- The tokens never stored by kind (their sum is host_never_stored_tokens): offers dropped for
-- want of a slot, chunks past the prompt under offload_prompt_only, sparse groups' unkept
-- boundaries.
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS host_never_stored_no_slot_tokens BIGINT DEFAULT 0;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS host_never_stored_decode_tokens BIGINT DEFAULT 0;
ALTER TABLE replay_requests ADD COLUMN IF NOT EXISTS host_never_stored_sparse_tokens BIGINT DEFAULT 0;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS host_never_stored_no_slot_tokens BIGINT DEFAULT 0;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS host_never_stored_decode_tokens BIGINT DEFAULT 0;
ALTER TABLE replay_summary ADD COLUMN IF NOT EXISTS host_never_stored_sparse_tokens BIGINT DEFAULT 0;
