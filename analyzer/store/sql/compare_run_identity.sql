-- What makes run $run_id's figures what they are, beside its trace: its policy, the measured
-- part and the hpa version (`hpa compare` warns when two runs are one replay).
SELECT policy, measure_from, hpa_version
FROM replay_runs
WHERE run_id = $run_id;
