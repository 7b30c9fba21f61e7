-- DuckDB's default worker threads on this connection (store.db.capped_memory).
RESET threads;
