-- Per measured request of run $1: the shared prefix before it was floored to whole blocks
-- (L3 plus the granularity loss, capped at the last prompt token) and the granularity loss.
SELECT least(matchable_tokens + lost_granularity_tokens, prompt_tokens - 1) AS shared,
       lost_granularity_tokens
FROM replay_requests WHERE run_id = ? AND measured;
