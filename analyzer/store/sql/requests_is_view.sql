-- Whether `requests` on this connection is a view (a Parquet dataset registered in its
-- place: analyzer.store.dataset) rather than the table ingest writes.
SELECT count(*) > 0 AS is_view
FROM information_schema.tables
WHERE table_name = 'requests' AND table_type = 'VIEW';
