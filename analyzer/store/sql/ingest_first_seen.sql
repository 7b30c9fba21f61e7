-- Where each stored request id was first seen (a later duplicate is rejected naming it).
SELECT request_id, source_id, line_no
FROM requests;
