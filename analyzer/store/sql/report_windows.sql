-- `hpa report`: per-window sums (deltas over the requests arriving in each window, never
-- a running total) of the measured requests (warm-up requests, --measure-from, are not
-- counted, as in report_groups.sql). $by_seq: window by arrival order when the trace has no
-- timestamps; window w covers [$t0 + w * $width, $t0 + (w + 1) * $width). Each row also
-- carries its run's warm-up: the requests not measured and where the measured ones start
-- on the same clock (the chart shades the span before it).
WITH req AS (
    SELECT
        run_id,
        measured,
        prompt_tokens,
        hit_tokens,
        sparse_retention_miss_tokens,
        CASE WHEN $by_seq THEN arrival_seq ELSE coalesce(timestamp_s, $t0) END AS t
    FROM replay_requests
    WHERE list_contains($runs, run_id)
),
warm_up AS (
    SELECT
        run_id,
        count(*) FILTER (WHERE NOT measured) AS warmup_requests,
        min(t) FILTER (WHERE measured)::DOUBLE AS measured_from
    FROM req
    GROUP BY run_id
)
SELECT
    run_id,
    floor((t - $t0) / $width)::BIGINT AS window_idx,
    count(*) AS num_requests,
    sum(prompt_tokens)::BIGINT AS prompt_tokens,
    sum(hit_tokens)::BIGINT AS hit_tokens,
    sum(sparse_retention_miss_tokens)::BIGINT AS sparse_retention_miss_tokens,
    any_value(warmup_requests) AS warmup_requests,
    any_value(measured_from) AS measured_from
FROM req
JOIN warm_up USING (run_id)
WHERE measured  -- warm-up requests (--measure-from) are not counted
GROUP BY ALL
ORDER BY run_id, window_idx;
