-- The ingest command ended: its files are part of the store.
DELETE FROM meta
WHERE key = 'ingest_open_from_source';
