-- What the stored trace is: the ingested files' hashes in ingest order, and the counts.
SELECT
    string_agg(sha256, ',' ORDER BY source_id) AS sources,
    (SELECT count(*) FROM requests) AS num_requests
FROM sources;
