-- Table written by `hpa validate`: one row per compared figure and group of one validation
-- (a replay run beside what an engine observed). error_tokens = predicted - observed;
-- relative_error = error / observed (NULL when nothing was observed but something predicted).
CREATE TABLE IF NOT EXISTS validations (
    validation_id INTEGER NOT NULL,
    run_id INTEGER NOT NULL,
    created_at TIMESTAMP NOT NULL,
    window_start_s DOUBLE,
    window_end_s DOUBLE,
    metrics_before VARCHAR,
    metrics_after VARCHAR,
    model_name VARCHAR,
    source VARCHAR NOT NULL,
    figure VARCHAR NOT NULL,
    prompt_family VARCHAR NOT NULL,
    model_revision VARCHAR NOT NULL,
    requests BIGINT NOT NULL,
    not_observed_requests BIGINT,
    observed_tokens BIGINT NOT NULL,
    predicted_tokens BIGINT NOT NULL,
    error_tokens BIGINT NOT NULL,
    relative_error DOUBLE,
    mean_abs_error_tokens DOUBLE,
    exact_share DOUBLE
);

-- `hpa validate`'s per-request error by cause (analyzer/metrics/validate_causes.py): the
-- signed tokens of error_tokens each cause explains (under-prediction negative; the rows of a
-- validation add up to its overall per-request error) and the requests it explains part of.
CREATE TABLE IF NOT EXISTS validation_causes (
    validation_id INTEGER NOT NULL,
    cause VARCHAR NOT NULL,
    engine_did VARCHAR NOT NULL,
    requests BIGINT NOT NULL,
    error_tokens BIGINT NOT NULL,
    share_of_abs_error DOUBLE NOT NULL
);
