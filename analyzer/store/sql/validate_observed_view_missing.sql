-- As validate_observed_view, for a store whose requests have no cached_tokens column.
CREATE OR REPLACE TEMP VIEW observed_requests AS
SELECT request_id, NULL::BIGINT AS cached_tokens
FROM requests;
