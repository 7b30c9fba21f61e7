-- The `any` namespaces of match_request_meta.sql (same dense ids), described by value.
-- The null test runs as a filter (as there): in a projection it read every hash id.
WITH hashed AS (SELECT arrival_seq FROM requests WHERE block_hash_ids IS NOT NULL)
SELECT DISTINCT
    dense_rank() OVER (ORDER BY is_hash, block_size, cache_salt, lora_name) - 1 AS ns_any,
    is_hash,
    CASE WHEN is_hash THEN block_size END AS block_size,
    cache_salt,
    lora_name
FROM (SELECT h.arrival_seq IS NOT NULL AS is_hash, q.block_size, q.cache_salt, q.lora_name
      FROM requests q LEFT JOIN hashed h ON h.arrival_seq = q.arrival_seq)
ORDER BY ns_any;
