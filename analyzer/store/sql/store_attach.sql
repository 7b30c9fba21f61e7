-- The store file, written in row groups of 2,048 rows (DuckDB's vector size): see
-- store.db._attach. `store_use` then makes it the connection's default database.
ATTACH $path AS hpa_store (ROW_GROUP_SIZE 2048);
