-- DuckDB's default buffer memory limit on this connection (store.db.capped_memory).
RESET memory_limit;
