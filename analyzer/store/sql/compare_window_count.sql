-- Measured requests of run $run_id in the window [$start, $end) seconds (`hpa compare` checks none is empty).
SELECT count(*)
FROM replay_requests
WHERE run_id = $run_id AND measured AND timestamp_s >= $start AND timestamp_s < $end;
