-- Flag the prompts of source $source_id that have exactly $cut_at ids, the length at which
-- its log cuts token lists (vLLM's --max-log-len): they may be longer. Returns the count.
UPDATE requests SET log_cut_tokens = $cut_at
WHERE source_id = $source_id AND prompt_tokens = $cut_at;
