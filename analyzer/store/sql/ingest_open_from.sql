-- Whether an ingest command has not ended (its marker, ingest_open.sql, is still there).
SELECT count(*)
FROM meta
WHERE key = 'ingest_open_from_source';
