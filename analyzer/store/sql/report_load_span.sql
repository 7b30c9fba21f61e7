-- The latest arrival (simulated seconds; the clock starts at 0) of the concurrent run in
-- $runs (the report asks one run at a time), which sets the width of that run's load
-- windows. Measured requests, as in replay_load_summary.sql.
SELECT max(arrival_s)
FROM replay_requests
WHERE list_contains($runs, run_id) AND measured AND arrival_s IS NOT NULL;
