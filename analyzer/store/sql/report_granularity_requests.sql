-- Per measured request of run $1: its matchable and granularity-lost tokens and its prompt
-- tokens (config.block_floor.best_block takes them).
SELECT matchable_tokens, lost_granularity_tokens, prompt_tokens
FROM replay_requests WHERE run_id = ? AND measured;
