-- `hpa report`: per-window sums (deltas over the requests arriving in each window, never
-- a running total). $by_seq: window by arrival order when the trace has no timestamps;
-- window w covers [$t0 + w * $width, $t0 + (w + 1) * $width).
SELECT
    run_id,
    floor((CASE WHEN $by_seq THEN arrival_seq ELSE coalesce(timestamp_s, $t0) END - $t0)
        / $width)::BIGINT AS window_idx,
    count(*) AS num_requests,
    sum(prompt_tokens)::BIGINT AS prompt_tokens,
    sum(hit_tokens)::BIGINT AS hit_tokens,
    sum(sparse_retention_miss_tokens)::BIGINT AS sparse_retention_miss_tokens
FROM replay_requests
WHERE list_contains($runs, run_id)
GROUP BY ALL
ORDER BY run_id, window_idx;
