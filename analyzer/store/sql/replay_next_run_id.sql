SELECT coalesce(max(run_id), 0) + 1 FROM replay_runs
