-- DuckDB's default buffer memory limit on this connection (store.scan.scan_settings).
RESET memory_limit;
