-- A Parquet dataset (relation `requests_dataset`) as the store's `requests` table. The
-- placeholder below is filled with every stored column, NULL of its type where the dataset
-- lacks it (analyzer.store.dataset.register_requests).
CREATE OR REPLACE TEMP VIEW requests AS
SELECT
    {columns}
FROM requests_dataset;
