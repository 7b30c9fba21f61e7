-- DuckDB's default buffer memory limit on this connection (store.db.scan_settings).
RESET memory_limit;
