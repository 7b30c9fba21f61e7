-- Every ingested file by content hash (a file ingested again is a duplicate, unless its
-- earlier ingest stored nothing under another format).
SELECT sha256, source_id, path, format, num_stored
FROM sources;
