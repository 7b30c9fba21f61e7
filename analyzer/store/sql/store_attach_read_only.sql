-- The store file, read-only (beside other readers): see store.db._read_only_open, and
-- store.db.open_to_store, which attaches it again writable in the same DuckDB instance.
-- `store_use` then makes it the connection's default database.
ATTACH $path AS hpa_store (READ_ONLY);
