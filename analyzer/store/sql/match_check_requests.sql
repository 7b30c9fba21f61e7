-- `hpa match` precondition: every request has a dense arrival_seq 0..n-1.
SELECT
    count(*) AS num_requests,
    count(arrival_seq) AS num_sequenced,
    count(DISTINCT arrival_seq) AS num_distinct,
    coalesce(min(arrival_seq), 0) AS min_seq,
    coalesce(max(arrival_seq), -1) AS max_seq
FROM requests;
