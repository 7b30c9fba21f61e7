-- What the engine reported per request (`hpa validate`): the trace's cached_tokens column.
CREATE OR REPLACE TEMP VIEW observed_requests AS
SELECT request_id, cached_tokens
FROM requests;
