-- Every value of one list column of the rows a query selects (store.tokens fills the
-- placeholders), one row's after another in storage order: DuckDB hands this plain column
-- over to Arrow about twice as fast as the lists themselves.
SELECT unnest({column}) AS v FROM ({rows}) AS rows;
