SELECT * EXCLUDE (run_id) FROM replay_requests
WHERE run_id = $run_id
ORDER BY arrival_seq
