-- The lists of every request's inserted sequence (match_sequences_view.sql), in storage
-- order (store.tokens places them): a hash-id request's outputs are not part of it.
SELECT
    arrival_seq,
    prompt_token_ids,
    block_hash_ids,
    CASE WHEN block_hash_ids IS NULL THEN output_token_ids END AS output_token_ids
FROM requests;
