-- `hpa report`'s load figure: per arrival window of the concurrent runs $runs (simulated
-- seconds; window w covers arrival_s in [w * $width, (w + 1) * $width)), the TTFT and queue
-- time quantiles of the requests arriving in it, and their preemptions. Measured requests,
-- as in replay_load_summary.sql; a request never scheduled has no times and counts only in
-- num_requests.
SELECT
    run_id,
    floor(arrival_s / $width)::BIGINT AS window_idx,
    count(*) AS num_requests,
    count(ttft_s) AS num_timed,
    quantile_cont(ttft_s, 0.5) AS ttft_p50_s,
    quantile_cont(ttft_s, 0.9) AS ttft_p90_s,
    quantile_cont(queue_s, 0.5) AS queue_p50_s,
    quantile_cont(queue_s, 0.9) AS queue_p90_s,
    sum(num_preemptions)::BIGINT AS num_preemptions,
    count(*) FILTER (WHERE num_preemptions > 0) AS num_preempted_requests,
    sum(recomputed_tokens)::BIGINT AS recomputed_tokens
FROM replay_requests
WHERE list_contains($runs, run_id) AND measured AND arrival_s IS NOT NULL
GROUP BY ALL
ORDER BY run_id, window_idx;
