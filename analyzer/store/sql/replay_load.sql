-- Everything the replay needs, in arrival order.
SELECT
    arrival_seq, request_id, timestamp_s, prompt_tokens, prompt_token_ids, block_hash_ids,
    block_size, output_tokens, output_token_ids, model_revision, prompt_family, replica,
    conversation_id, cache_salt, lora_name
FROM requests
ORDER BY arrival_seq;
