-- The sources row of source $source_id (an ingest that stored nothing, read again).
DELETE FROM sources
WHERE source_id = $source_id;
