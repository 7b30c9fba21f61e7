-- Every request's sequence (token ids, or block hash ids), its shared-prefix length and its
-- cache namespace (salt and LoRA), in arrival order (the report's junction paths).
SELECT r.arrival_seq, coalesce(m.shared_any_tokens, 0) AS shared_tokens, r.prompt_tokens,
       coalesce(r.cache_salt, '') || chr(31) || coalesce(r.lora_name, '') AS salt_lora,
       r.prompt_token_ids::BIGINT[] AS token_ids, r.block_hash_ids, r.block_size
FROM requests AS r LEFT JOIN prefix_matches AS m ON m.arrival_seq = r.arrival_seq
ORDER BY r.arrival_seq;
