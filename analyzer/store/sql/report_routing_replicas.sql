-- `hpa report`'s routing table: per run in $runs and replica (and, replica NULL, the run in
-- all), over the measured requests (as report_groups.sql and replay_load_summary.sql: the
-- warm-up requests of --measure-from are not counted), the requests routed there, their
-- prompt and hit tokens and the tokens lost to routing (a prefix another replica held); TTFT
-- and queue time (NULL for a serial run); and what a live router saw of the replica at its
-- picks (route_*: waiting and running requests, KV blocks in use; NULL when the routing was
-- static). Replicas in numeric order where their labels are numbers.
SELECT
    run_id,
    replica,
    count(*) AS num_requests,
    sum(prompt_tokens)::BIGINT AS prompt_tokens,
    sum(hit_tokens)::BIGINT AS hit_tokens,
    sum(lost_routing_tokens)::BIGINT AS lost_routing_tokens,
    quantile_cont(ttft_s, 0.5) AS ttft_p50_s,
    quantile_cont(ttft_s, 0.99) AS ttft_p99_s,
    avg(queue_s) AS queue_mean_s,
    count(route_waiting) AS num_seen,
    avg(route_waiting) AS seen_waiting_mean,
    max(route_waiting) AS seen_waiting_max,
    avg(route_running) AS seen_running_mean,
    max(route_running) AS seen_running_max,
    max(route_kv_blocks_used) AS seen_kv_blocks_peak
FROM replay_requests
WHERE list_contains($runs, run_id) AND measured  -- warm-up requests (--measure-from) are not counted
GROUP BY GROUPING SETS ((run_id, replica), (run_id))
ORDER BY run_id, replica IS NULL, try_cast(replica AS BIGINT) NULLS LAST, replica;
