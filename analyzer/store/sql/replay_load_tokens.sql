-- The token lists of every request, in storage order (store.tokens places them).
SELECT arrival_seq, prompt_token_ids, block_hash_ids, output_token_ids
FROM requests;
