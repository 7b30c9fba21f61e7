-- (line_no, request_id) of the prompts of source $source_id cut at $cut_at ids, in order.
SELECT line_no, request_id FROM requests
WHERE source_id = $source_id AND prompt_tokens = $cut_at
ORDER BY line_no;
