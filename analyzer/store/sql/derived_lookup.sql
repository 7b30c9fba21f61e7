-- Where a derived table came from (no row: written before hpa recorded it).
SELECT trace_fingerprint, num_requests
FROM derived_tables
WHERE table_name = $table_name;
