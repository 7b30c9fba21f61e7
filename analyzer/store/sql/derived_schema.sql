-- What each table a command derived from the requests was computed from (`hpa match`):
-- the trace fingerprint (trace_fingerprint.sql, or a dataset's) and its request count. A
-- reader compares it with the runs it joins to (`hpa report`).
CREATE TABLE IF NOT EXISTS derived_tables (
    table_name VARCHAR PRIMARY KEY,
    command VARCHAR NOT NULL,
    trace_fingerprint VARCHAR NOT NULL,
    num_requests BIGINT NOT NULL
);
