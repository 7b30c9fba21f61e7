-- The arrival_seq of each row a query selects (store.tokens: the query's text fills the
-- placeholder), in the order DuckDB streams them.
SELECT arrival_seq FROM ({rows}) AS rows;
