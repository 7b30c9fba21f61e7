-- Remove the prompts of source $source_id cut at $cut_at ids (hpa ingest --reject-truncated):
-- (line_no, request_id) of each removed.
DELETE FROM requests WHERE source_id = $source_id AND prompt_tokens = $cut_at
RETURNING line_no, request_id;
