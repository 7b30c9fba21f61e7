-- The token lists of the requests listed in the registered relation match_wanted (their
-- arrival_seq from $lo to $hi), in arrival order (the reader puts each inserted sequence
-- together). An IN filter, not a join, and the range: DuckDB then skips the row groups
-- outside it and reads the lists of the rows it keeps (70 M tokens: 0.55 -> 0.1 s a fetch).
SELECT r.prompt_token_ids, r.output_token_ids, r.block_hash_ids
FROM requests AS r
WHERE r.arrival_seq BETWEEN $lo AND $hi
  AND r.arrival_seq IN (SELECT arrival_seq FROM match_wanted)
ORDER BY r.arrival_seq;
