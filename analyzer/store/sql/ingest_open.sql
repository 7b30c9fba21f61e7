-- An ingest command starts: its files get source ids from $first_source_id on. Until the
-- marker is removed (with the arrival order, when the command ends) they are unfinished.
INSERT OR REPLACE INTO meta VALUES ('ingest_open_from_source', $first_source_id::VARCHAR);
