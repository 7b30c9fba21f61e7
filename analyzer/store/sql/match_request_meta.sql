-- Per request, in arrival order: the cache namespaces the prefix matcher separates
-- (hash-id vs token traces, block size, cache_salt, LoRA; then + replica, + conversation)
-- as dense ids, and the lengths in units (tokens, or blocks for hash-id traces).
-- NULLs form one group of their own: a trace without replicas is one replica.
WITH r AS (
    SELECT
        arrival_seq,
        block_hash_ids IS NOT NULL AS is_hash,
        block_size,
        cache_salt,
        lora_name,
        replica,
        conversation_id,
        prompt_tokens,
        CASE WHEN block_hash_ids IS NOT NULL THEN len(block_hash_ids)
             ELSE coalesce(len(prompt_token_ids), 0) END AS query_len,
        CASE WHEN block_hash_ids IS NOT NULL THEN len(block_hash_ids)
             ELSE coalesce(len(prompt_token_ids), 0) + coalesce(len(output_token_ids), 0)
        END AS insert_len
    FROM requests
)
SELECT
    arrival_seq,
    dense_rank() OVER (ORDER BY is_hash, block_size, cache_salt, lora_name) - 1 AS ns_any,
    dense_rank() OVER (ORDER BY is_hash, block_size, cache_salt, lora_name, replica) - 1
        AS ns_replica,
    CASE WHEN conversation_id IS NULL THEN -1
         ELSE dense_rank() OVER (
             ORDER BY is_hash, block_size, cache_salt, lora_name, conversation_id) - 1
    END AS ns_conversation,
    query_len,
    insert_len,
    CASE WHEN is_hash THEN coalesce(block_size, 0) ELSE 0 END AS block_size,
    prompt_tokens
FROM r
ORDER BY arrival_seq;
