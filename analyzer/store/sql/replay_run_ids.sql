-- Every replay run id, ascending.
SELECT run_id
FROM replay_runs
ORDER BY run_id;
