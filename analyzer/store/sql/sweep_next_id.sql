SELECT coalesce(max(sweep_id), 0) + 1 FROM sweeps
