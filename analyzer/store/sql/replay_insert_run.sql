INSERT INTO replay_runs (
    run_id, policy, trace_fingerprint, num_requests, prompt_tokens, hit_tokens,
    replay_seconds, created_at, hpa_version, measure_from, name
)
VALUES (?, ?, ?, ?, ?, ?, ?, current_timestamp, ?, ?, ?)
