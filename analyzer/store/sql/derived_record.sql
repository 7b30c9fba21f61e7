-- Record that `table_name` was derived by `command` from the trace `trace_fingerprint`.
INSERT OR REPLACE INTO derived_tables
VALUES ($table_name, $command, $trace_fingerprint, $num_requests);
