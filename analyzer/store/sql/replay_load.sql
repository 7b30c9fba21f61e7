-- Everything the replay needs but the token ids, in arrival order, with the length of each
-- token list (0 where null); replay_load_tokens.sql streams the lists themselves.
SELECT
    arrival_seq, request_id, timestamp_s, prompt_tokens, block_size, output_tokens,
    model_revision, prompt_family, replica, conversation_id, cache_salt, lora_name,
    coalesce(len(prompt_token_ids), 0) AS prompt_token_ids,
    coalesce(len(block_hash_ids), 0) AS block_hash_ids,
    coalesce(len(output_token_ids), 0) AS output_token_ids,
    prompt_token_ids IS NOT NULL AS has_prompt_token_ids,
    block_hash_ids IS NOT NULL AS has_block_hash_ids,
    output_token_ids IS NOT NULL AS has_output_token_ids
FROM requests
ORDER BY arrival_seq;
