-- Every table and view in the store.
SELECT table_name
FROM information_schema.tables;
