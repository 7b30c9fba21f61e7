-- Rows of one validated batch (registered as `batch_rows`) from source $source_id.
INSERT INTO requests (
    request_id, source_id, line_no, timestamp_s, prompt_tokens, prompt_token_ids,
    block_hash_ids, block_size, output_tokens, output_token_ids, model_revision,
    prompt_family, prompt_family_source, replica, conversation_id, parent_request_id,
    cache_salt, lora_name, spec_decode, tenant, ttft_ms, extra, cached_tokens
)
SELECT
    request_id, $source_id, line_no, timestamp_s, prompt_tokens, prompt_token_ids,
    block_hash_ids, block_size, output_tokens, output_token_ids, model_revision,
    prompt_family, prompt_family_source, replica, conversation_id, parent_request_id,
    cache_salt, lora_name, spec_decode, tenant, ttft_ms, extra, cached_tokens
FROM batch_rows;
