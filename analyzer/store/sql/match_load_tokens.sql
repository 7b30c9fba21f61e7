-- The lists of every request's inserted sequence (match_sequences_view.sql), in storage
-- order (store.tokens places them): a hash-id request's outputs are not part of it. Its
-- source, for a stream merged from one a source (pipeline.token_stream.source_parts).
SELECT
    arrival_seq,
    source_id,
    prompt_token_ids,
    block_hash_ids,
    CASE WHEN block_hash_ids IS NULL THEN output_token_ids END AS output_token_ids
FROM requests;
