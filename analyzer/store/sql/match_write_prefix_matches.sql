-- Table prefix_matches: one row per request in arrival order, from the relation
-- match_rows (arrival_seq, shared_*_tokens, parent_seq) registered by `hpa match`.
CREATE OR REPLACE TABLE prefix_matches AS
SELECT
    r.request_id,
    m.arrival_seq,
    r.prompt_tokens,
    m.shared_any_tokens,
    p.request_id AS shared_parent_request_id,
    m.shared_replica_tokens,
    m.shared_conversation_tokens
FROM match_rows AS m
JOIN requests AS r ON r.arrival_seq = m.arrival_seq
LEFT JOIN requests AS p ON p.arrival_seq = m.parent_seq
ORDER BY m.arrival_seq;
