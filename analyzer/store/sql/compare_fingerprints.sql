-- The trace fingerprint of runs $a and $b (`hpa compare` refuses runs of different traces).
SELECT run_id, trace_fingerprint
FROM replay_runs
WHERE run_id IN ($a, $b);
