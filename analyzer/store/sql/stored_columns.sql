-- Every stored table's and view's columns, in table order (`hpa query`: the columns closest
-- to one a statement named that is not stored).
SELECT table_name, column_name
FROM duckdb_columns()
WHERE NOT internal
ORDER BY table_name, column_index;
