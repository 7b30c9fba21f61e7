-- Arrival order over every stored request: timestamp, ties by ingest order of the
-- source and then file order. A record without a timestamp inherits the timestamp of
-- the record before it in its file (or sorts first when none), so it keeps its file
-- position among its neighbours.
UPDATE requests
SET arrival_seq = o.arrival_seq
FROM (
    SELECT
        request_id,
        row_number() OVER (ORDER BY sort_s NULLS FIRST, source_id, line_no) - 1 AS arrival_seq
    FROM (
        SELECT
            request_id, source_id, line_no,
            last_value(timestamp_s IGNORE NULLS) OVER (
                PARTITION BY source_id ORDER BY line_no
                ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
            ) AS sort_s
        FROM requests
    )
) AS o
WHERE requests.request_id = o.request_id;
