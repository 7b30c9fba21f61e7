-- Requests, timestamped requests and the timestamp span of run $run_id's measured requests
-- (`hpa compare`), and its measure_from (0 when every request is measured).
SELECT
    count(*),
    count(timestamp_s),
    min(timestamp_s),
    max(timestamp_s),
    any_value((SELECT measure_from FROM replay_runs WHERE run_id = $run_id))
FROM replay_requests
WHERE run_id = $run_id AND measured;
