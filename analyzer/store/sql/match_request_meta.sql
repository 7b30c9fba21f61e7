-- Per request, in arrival order: the cache namespaces the prefix matcher separates
-- (hash-id vs token traces, block size, cache_salt, LoRA; then + replica, + conversation)
-- as dense ids, and the lengths in units (tokens, or blocks for hash-id traces).
-- NULLs form one group of their own: a trace without replicas is one replica.
-- Placeholders in braces: list lengths, read from no list in the store (see replay_load.sql).
WITH hashed AS (SELECT arrival_seq FROM requests WHERE block_hash_ids IS NOT NULL),
answered AS (SELECT arrival_seq FROM requests WHERE output_token_ids IS NOT NULL),
r AS (
    SELECT
        q.arrival_seq,
        h.arrival_seq IS NOT NULL AS is_hash,
        q.block_size,
        q.cache_salt,
        q.lora_name,
        q.replica,
        q.conversation_id,
        q.prompt_tokens,
        CASE WHEN h.arrival_seq IS NOT NULL THEN {hash_len} ELSE {prompt_len} END
            AS query_len,
        CASE WHEN h.arrival_seq IS NOT NULL THEN {hash_len}
             WHEN a.arrival_seq IS NOT NULL THEN {prompt_len} + {output_len}
             ELSE {prompt_len} END AS insert_len
    FROM requests q
    LEFT JOIN hashed h ON h.arrival_seq = q.arrival_seq
    LEFT JOIN answered a ON a.arrival_seq = q.arrival_seq
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
