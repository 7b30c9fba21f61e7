-- The timestamp span and the request count of the runs $runs (the report's windows).
SELECT min(timestamp_s), max(timestamp_s), max(arrival_seq) + 1
FROM replay_requests
WHERE list_contains($runs, run_id);
