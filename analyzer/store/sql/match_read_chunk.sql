-- The token lists of requests with $start <= arrival_seq < $stop, in arrival order; each
-- request's inserted sequence (match_sequences_view.sql) is put together by the reader.
SELECT prompt_token_ids, output_token_ids, block_hash_ids
FROM requests
WHERE arrival_seq >= $start AND arrival_seq < $stop
ORDER BY arrival_seq;
