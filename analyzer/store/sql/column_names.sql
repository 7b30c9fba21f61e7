-- The columns of table $table_name.
SELECT column_name
FROM information_schema.columns
WHERE table_name = $table_name;
