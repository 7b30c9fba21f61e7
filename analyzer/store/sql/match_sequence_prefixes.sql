-- The first $units units of every request's inserted sequence (as
-- match_partition_sequences.sql defines it), in arrival order: what the driver of a
-- sharded `hpa match` or replay L1/L2 pass matches itself (analyzer/prefixes/shallow.py).
-- Token requests: prompt + output (without its last $drop_last tokens) in `tokens`;
-- hash-id requests: `block_hash_ids`.
SELECT
    CASE WHEN block_hash_ids IS NULL THEN list_slice(list_concat(
        prompt_token_ids,
        list_slice(coalesce(output_token_ids, []::INTEGER[]), 1,
                   len(coalesce(output_token_ids, []::INTEGER[])) - $drop_last)), 1, $units)
    END AS tokens,
    list_slice(block_hash_ids, 1, $units) AS block_hash_ids
FROM requests
ORDER BY arrival_seq;
