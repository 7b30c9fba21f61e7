-- The canonical policy JSON of run $run_id.
SELECT policy
FROM replay_runs
WHERE run_id = $run_id;
