SELECT * EXCLUDE (run_id) FROM replay_summary
WHERE run_id = ?
ORDER BY prompt_tokens DESC, prompt_family, model_revision
