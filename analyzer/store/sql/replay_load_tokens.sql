-- The token lists of every request, in storage order (store.tokens places them); its
-- source, for a stream merged from one a source (pipeline.token_stream.source_parts).
SELECT arrival_seq, source_id, prompt_token_ids, block_hash_ids, output_token_ids
FROM requests;
