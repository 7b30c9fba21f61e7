-- The rejects an unfinished ingest of source $source_id stored.
DELETE FROM rejects
WHERE source_id = $source_id;
