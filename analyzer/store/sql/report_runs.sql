-- Every replay run with its totals (`hpa report`).
SELECT run_id, policy, trace_fingerprint, num_requests, prompt_tokens, hit_tokens, hpa_version
FROM replay_runs
ORDER BY run_id;
