-- DuckDB's worker threads on this connection (store.db.scan_settings).
SET threads = $threads;
