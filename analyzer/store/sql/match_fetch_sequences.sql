-- The token lists of the requests listed in the registered relation match_wanted, in
-- arrival order (the reader puts each inserted sequence together).
SELECT r.prompt_token_ids, r.output_token_ids, r.block_hash_ids
FROM requests AS r
SEMI JOIN match_wanted AS w ON r.arrival_seq = w.arrival_seq
ORDER BY r.arrival_seq;
