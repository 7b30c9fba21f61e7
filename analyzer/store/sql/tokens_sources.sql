-- The source_id of each row a query selects (pipeline.token_stream: the query's text fills
-- the placeholder), in the order DuckDB streams them.
SELECT source_id FROM ({rows}) AS rows;
