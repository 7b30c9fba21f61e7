-- The model revisions of run $run_id's measured requests ('(none)' for requests without one), in order.
SELECT DISTINCT coalesce(model_revision, '(none)')
FROM replay_requests
WHERE run_id = $run_id AND measured
ORDER BY 1;
