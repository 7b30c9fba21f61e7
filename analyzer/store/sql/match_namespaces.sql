-- The `any` namespaces of match_request_meta.sql (same dense ids), described by value.
SELECT DISTINCT
    dense_rank() OVER (ORDER BY is_hash, block_size, cache_salt, lora_name) - 1 AS ns_any,
    is_hash,
    CASE WHEN is_hash THEN block_size END AS block_size,
    cache_salt,
    lora_name
FROM (SELECT block_hash_ids IS NOT NULL AS is_hash, block_size, cache_salt, lora_name
      FROM requests)
ORDER BY ns_any;
