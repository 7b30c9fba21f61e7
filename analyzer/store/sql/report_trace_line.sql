-- The trace as run $run_id replayed it, in one line of the report's summary: requests,
-- prompt tokens, the timestamp span (seconds; NULL without timestamps), and the distinct
-- model revisions and prompt families (derived ones counted as families).
SELECT
    count(*) AS requests,
    sum(prompt_tokens)::BIGINT AS prompt_tokens,
    min(timestamp_s) AS first_s,
    max(timestamp_s) AS last_s,
    count(DISTINCT model_revision) AS model_revisions,
    count(DISTINCT prompt_family) AS prompt_families
FROM replay_requests
WHERE run_id = $run_id;
