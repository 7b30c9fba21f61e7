-- DuckDB's default worker threads on this connection (store.scan.scan_settings).
RESET threads;
