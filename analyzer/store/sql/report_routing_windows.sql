-- `hpa report`'s routing figure: per replica of run $run_id and window of arrival time
-- (window w covers [$t0 + w * $width, $t0 + (w + 1) * $width) of the clock $clock:
-- 'arrival' the simulated arrival_s of a concurrent run, as the load windows; 'trace' the
-- trace's timestamp_s, a request without one at $t0, as the time windows; 'order' the
-- arrival order), the requests routed there, their prompt and hit tokens, and the mean
-- waiting + running requests a live router saw on the replica at its picks (NULL when the
-- routing was static). Measured requests, as the load and time windows (warm-up requests,
-- --measure-from, are in no window).
WITH req AS (
    SELECT
        *,
        CASE $clock
            WHEN 'arrival' THEN arrival_s
            WHEN 'trace' THEN coalesce(timestamp_s, $t0)
            ELSE arrival_seq
        END AS t_s
    FROM replay_requests
    WHERE run_id = $run_id AND measured  -- warm-up requests (--measure-from) are not counted
)
SELECT
    replica,
    floor((t_s - $t0) / $width)::BIGINT AS window_idx,
    count(*) AS num_requests,
    sum(prompt_tokens)::BIGINT AS prompt_tokens,
    sum(hit_tokens)::BIGINT AS hit_tokens,
    count(route_waiting) AS num_seen,
    avg(route_waiting + route_running) AS seen_load_mean
FROM req
WHERE t_s IS NOT NULL
GROUP BY ALL
ORDER BY replica, window_idx;
