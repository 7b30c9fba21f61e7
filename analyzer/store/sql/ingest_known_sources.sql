-- Every ingested file by content hash (a file ingested again is a duplicate).
SELECT sha256, source_id, path
FROM sources;
