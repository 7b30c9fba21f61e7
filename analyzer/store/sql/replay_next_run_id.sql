-- The next run id: above every stored run and every row a run left (a store written by an
-- earlier hpa may hold rows of a run that was killed before its replay_runs row).
SELECT greatest(
    (SELECT coalesce(max(run_id), 0) FROM replay_runs),
    (SELECT coalesce(max(run_id), 0) FROM replay_requests),
    (SELECT coalesce(max(run_id), 0) FROM replay_summary)
) + 1;
