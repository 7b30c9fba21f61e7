-- The requests an unfinished ingest of source $source_id stored.
DELETE FROM requests
WHERE source_id = $source_id;
