-- Each request's prompt (token ids, or block hash ids) in arrival order, streamed in
-- batches to the driver for prefix-aware routing of a trace it does not load whole.
SELECT CASE WHEN block_hash_ids IS NOT NULL THEN block_hash_ids
            ELSE CAST(prompt_token_ids AS BIGINT[]) END AS prompt
FROM requests
ORDER BY arrival_seq;
