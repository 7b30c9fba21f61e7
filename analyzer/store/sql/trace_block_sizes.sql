-- The hash block sizes (tokens) of the requests (none for a token-id trace): read before
-- the trace is loaded, so a geometry the trace cannot express fails at once.
SELECT DISTINCT block_size
FROM requests
WHERE block_size IS NOT NULL
ORDER BY 1;
