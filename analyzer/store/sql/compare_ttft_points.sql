-- (model revision, replayed fresh prefill, observed TTFT) of run $run_id's requests that
-- carry ttft_ms: the points of the TTFT cost-model fit of `hpa compare`. Measured requests
-- only: a warm-up request's replayed fresh prefill is a cold cache's, its ttft_ms a warm one's.
SELECT
    coalesce(r.model_revision, '(none)') AS model_revision,
    r.fresh_prefill_tokens,
    q.ttft_ms
FROM replay_requests AS r
JOIN requests AS q ON q.request_id = r.request_id
WHERE r.run_id = $run_id AND r.measured AND q.ttft_ms IS NOT NULL
ORDER BY r.arrival_seq;
