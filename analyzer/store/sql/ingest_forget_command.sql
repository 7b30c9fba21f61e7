-- Everything an ingest command that did not end stored: the files from the source id its
-- marker names on (ingest_open.sql), their requests and rejects, and then the marker.
DELETE FROM requests
WHERE source_id >= (SELECT value::INTEGER FROM meta WHERE key = 'ingest_open_from_source');
DELETE FROM rejects
WHERE source_id >= (SELECT value::INTEGER FROM meta WHERE key = 'ingest_open_from_source');
DELETE FROM sources
WHERE source_id >= (SELECT value::INTEGER FROM meta WHERE key = 'ingest_open_from_source');
DELETE FROM meta
WHERE key = 'ingest_open_from_source';
