-- The concurrent schedule's load figures of run $run_id (measured requests; simulated
-- seconds): TTFT and queueing quantiles, preemptions, recomputed tokens, and requests in
-- flight (arrival to finish) per (model revision, replica) partition, each on its own clock:
-- the peak, and the mean over the partition's span; and the most pool blocks in use at an
-- admission (bounded pools); the mean queue time of the first and the last quarter of the
-- arrivals (in arrival order, n // 4 requests, at least one: `hpa plan`'s saturation test,
-- store.runs.is_saturated). NULL times: a serial run.
WITH req AS (
    SELECT
        *,
        row_number() OVER (ORDER BY arrival_seq) AS arrival_rank,
        greatest(1, count(*) OVER () // 4) AS quarter,
        count(*) OVER () AS measured_requests
    FROM replay_requests WHERE run_id = $run_id AND measured
),
events AS (
    SELECT model_revision, replica, arrival_s AS t_s, 1 AS delta FROM req
    WHERE arrival_s IS NOT NULL AND finished_s IS NOT NULL
    UNION ALL
    SELECT model_revision, replica, finished_s, -1 FROM req
    WHERE arrival_s IS NOT NULL AND finished_s IS NOT NULL
),
running AS (
    SELECT model_revision, replica,
           sum(delta) OVER (
               PARTITION BY model_revision, replica ORDER BY t_s, delta
               ROWS UNBOUNDED PRECEDING
           ) AS in_flight
    FROM events
),
spans AS (
    SELECT model_revision, replica, sum(finished_s - arrival_s) AS busy_s,
           max(finished_s) - min(arrival_s) AS span_s
    FROM req
    WHERE arrival_s IS NOT NULL AND finished_s IS NOT NULL
    GROUP BY ALL
)
SELECT
    count(ttft_s) AS num_timed,
    quantile_cont(ttft_s, 0.5) AS ttft_p50_s,
    quantile_cont(ttft_s, 0.9) AS ttft_p90_s,
    quantile_cont(ttft_s, 0.99) AS ttft_p99_s,
    avg(queue_s) AS queue_mean_s,
    quantile_cont(queue_s, 0.99) AS queue_p99_s,
    sum(num_preemptions) AS num_preemptions,
    count(*) FILTER (WHERE num_preemptions > 0) AS num_preempted_requests,
    sum(recomputed_tokens) AS recomputed_tokens,
    (SELECT max(in_flight) FROM running) AS in_flight_peak,
    (SELECT sum(busy_s) / nullif(sum(span_s), 0) FROM spans) AS in_flight_mean,
    max(held_blocks) AS held_blocks_peak,
    coalesce(avg(queue_s) FILTER (WHERE arrival_rank <= quarter), 0)::DOUBLE
        AS queue_first_quarter_s,
    coalesce(avg(queue_s) FILTER (WHERE arrival_rank > measured_requests - quarter), 0)::DOUBLE
        AS queue_last_quarter_s
FROM req;
