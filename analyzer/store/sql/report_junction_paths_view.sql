-- The report's junction paths from the table `hpa match` wrote (a store matched by an
-- earlier hpa has none: the report computes them, analyzer/report/junction_paths.py).
CREATE OR REPLACE TEMP VIEW report_junction_paths AS
SELECT arrival_seq, junction_id
FROM junction_requests;
