-- Rows of an ingest killed midway: their file has no sources row (it is written last).
DELETE FROM requests
WHERE source_id NOT IN (SELECT source_id FROM sources);
DELETE FROM rejects
WHERE source_id NOT IN (SELECT source_id FROM sources);
