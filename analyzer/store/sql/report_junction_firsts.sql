-- Junctions more than one request passes through, with the arrival of the first of them.
SELECT j.junction_id, j.position_tokens, r.arrival_seq AS first_seq
FROM junctions AS j JOIN requests AS r ON r.request_id = j.first_request_id
WHERE j.num_requests_through > 1
ORDER BY j.position_tokens, j.junction_id;
