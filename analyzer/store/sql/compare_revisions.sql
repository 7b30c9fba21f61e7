-- The model revisions of run $run_id ('(none)' for requests without one), in order.
SELECT DISTINCT coalesce(model_revision, '(none)')
FROM replay_requests
WHERE run_id = $run_id
ORDER BY 1;
