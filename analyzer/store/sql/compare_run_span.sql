-- Requests, timestamped requests and the timestamp span of run $run_id (`hpa compare`).
SELECT count(*), count(timestamp_s), min(timestamp_s), max(timestamp_s)
FROM replay_requests
WHERE run_id = $run_id;
