-- Record the schema version of a new store.
INSERT INTO meta VALUES ('schema_version', $version)
ON CONFLICT (key) DO NOTHING;
