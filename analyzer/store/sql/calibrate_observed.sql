-- The TTFT each request was observed with (milliseconds; NULL when the trace has none), in
-- arrival order (`hpa calibrate`).
SELECT arrival_seq, ttft_ms
FROM requests
ORDER BY arrival_seq;
