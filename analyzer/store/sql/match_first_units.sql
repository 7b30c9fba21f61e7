-- Per request in arrival order: the first unit of its sequence (first token id, or first
-- block hash id). Requests with different first units (or namespaces) share no prefix, so
-- a sharded `hpa match` partitions by (namespace, first unit).
SELECT
    CASE WHEN block_hash_ids IS NOT NULL THEN block_hash_ids[1]
         ELSE CAST(prompt_token_ids[1] AS BIGINT) END AS first_unit
FROM requests
ORDER BY arrival_seq;
