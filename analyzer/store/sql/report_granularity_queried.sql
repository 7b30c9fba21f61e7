-- The prompt tokens the measured requests of run $1 queried.
SELECT sum(prompt_tokens) FROM replay_requests WHERE run_id = ? AND measured;
