-- The schema version the store was created with.
SELECT value
FROM meta
WHERE key = 'schema_version';
