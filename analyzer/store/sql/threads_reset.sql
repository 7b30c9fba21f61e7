-- DuckDB's default worker threads on this connection (store.db.scan_settings).
RESET threads;
