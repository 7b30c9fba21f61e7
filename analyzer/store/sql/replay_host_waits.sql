-- The waits for host KV tier loads of run $run_id over its measured requests that waited for
-- one (host_wait_steps > 0): how many, their mean and p99 seconds (quantile_cont, as the
-- report's Host tier table); `hpa replay`'s host line, whatever the number of groups.
SELECT
    count(*) AS waited,
    avg(host_wait_s) AS mean_s,
    quantile_cont(host_wait_s, 0.99) AS p99_s
FROM replay_requests
WHERE run_id = $run_id AND measured AND host_wait_steps > 0;
