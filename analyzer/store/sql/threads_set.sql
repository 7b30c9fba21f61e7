-- DuckDB's worker threads on this connection (store.db.capped_memory).
SET threads = $threads;
