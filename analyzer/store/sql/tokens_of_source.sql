-- The rows of one source that a query selects (pipeline.token_stream merges one stream a
-- source: the query's text and the source's id fill the placeholders), in storage order.
SELECT * FROM ({rows}) AS rows WHERE source_id = {source_id};
