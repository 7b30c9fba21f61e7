-- What the replay's driver needs of a trace it does not load whole (a Parquet dataset):
-- replay_load.sql without the token ids, plus each request's lengths
-- in units (query: prompt or blocks; inserted: + output but its last token, as the
-- replay's L1/L2 count it). Workers read the token ids of their own partitions.
SELECT
    arrival_seq, request_id, timestamp_s, prompt_tokens, block_size, output_tokens,
    model_revision, prompt_family, replica, conversation_id, cache_salt, lora_name,
    CASE WHEN block_hash_ids IS NOT NULL THEN len(block_hash_ids)
         ELSE len(prompt_token_ids) END AS query_len,
    CASE WHEN block_hash_ids IS NOT NULL THEN len(block_hash_ids)
         ELSE len(prompt_token_ids) + greatest(coalesce(len(output_token_ids), 0) - 1, 0)
    END AS insert_len
FROM requests
ORDER BY arrival_seq;
