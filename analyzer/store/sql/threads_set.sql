-- DuckDB's worker threads on this connection (store.scan.scan_settings).
SET threads = $threads;
