-- Everything the replay needs but the token ids, in arrival order, with the length of each
-- token list (0 where null); replay_load_tokens.sql streams the lists themselves.
-- The placeholders in braces are list lengths (store.db.with_list_lengths): in the store, the counts
-- ingest keeps beside the lists, so no list is read; null tests run as filters, which read
-- only validity (in a projection, `x IS NULL` and len(x) make DuckDB read and cache every
-- list: +160 MB on 70 M tokens). The streaming read checks each length against its list.
WITH hashed AS (SELECT arrival_seq FROM requests WHERE block_hash_ids IS NOT NULL),
answered AS (SELECT arrival_seq FROM requests WHERE output_token_ids IS NOT NULL),
r AS (
    SELECT
        q.*,
        h.arrival_seq IS NOT NULL AS has_block_hash_ids,
        a.arrival_seq IS NOT NULL AS has_output_token_ids
    FROM requests q
    LEFT JOIN hashed h ON h.arrival_seq = q.arrival_seq
    LEFT JOIN answered a ON a.arrival_seq = q.arrival_seq
)
SELECT
    arrival_seq, request_id, timestamp_s, prompt_tokens, block_size, output_tokens,
    model_revision, prompt_family, replica, conversation_id, cache_salt, lora_name,
    CASE WHEN has_block_hash_ids THEN 0 ELSE {prompt_len} END AS prompt_token_ids,
    CASE WHEN has_block_hash_ids THEN {hash_len} ELSE 0 END AS block_hash_ids,
    CASE WHEN has_output_token_ids THEN {output_len} ELSE 0 END AS output_token_ids,
    NOT has_block_hash_ids AS has_prompt_token_ids,
    has_block_hash_ids,
    has_output_token_ids
FROM r
ORDER BY arrival_seq;
