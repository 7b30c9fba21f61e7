-- Inserted sequences (as match_sequences_view.sql) of the requests listed in the registered
-- relation match_wanted: one partition of a sharded `hpa match` or replay, in arrival order.
-- Token requests: prompt + output (without its last $drop_last tokens: the replay's L1/L2
-- drop the sampled last token) in `tokens`; hash-id requests: `block_hash_ids`.
SELECT
    r.arrival_seq,
    CASE WHEN r.block_hash_ids IS NULL THEN list_concat(
        r.prompt_token_ids,
        list_slice(coalesce(r.output_token_ids, []::INTEGER[]), 1,
                   len(coalesce(r.output_token_ids, []::INTEGER[])) - $drop_last))
    END AS tokens,
    r.block_hash_ids
FROM requests AS r
SEMI JOIN match_wanted AS w ON r.arrival_seq = w.arrival_seq
ORDER BY r.arrival_seq;
