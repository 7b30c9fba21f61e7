-- The report's junction paths from the table `hpa match` wrote (a store matched by an
-- earlier hpa has none: the report then asks for `hpa match` again).
CREATE OR REPLACE TEMP VIEW report_junction_paths AS
SELECT arrival_seq, junction_id
FROM junction_requests;
