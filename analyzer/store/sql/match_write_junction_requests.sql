-- Table junction_requests: each request's deepest junction on its prompt path within its
-- shared prefix (shared_any_tokens capped at prompt_tokens - 1), among the junctions more
-- than one request passes through: where the report pins its outcome (the junction
-- section). From the relations match_rows, match_junction_nodes and match_junction_paths of
-- `hpa match` and table junctions (written first); a request pinned nowhere has no row.
CREATE OR REPLACE TABLE junction_requests AS
SELECT p.arrival_seq, arg_max(n.junction_id, n.position_tokens) AS junction_id
FROM match_junction_paths AS p
JOIN match_junction_nodes AS n ON n.junction_idx = p.junction_idx
JOIN junctions AS j ON j.junction_id = n.junction_id
JOIN match_rows AS m ON m.arrival_seq = p.arrival_seq
JOIN requests AS r ON r.arrival_seq = p.arrival_seq
WHERE p.on_prompt
    AND j.num_requests_through > 1
    AND n.position_tokens > 0
    AND n.position_tokens <= least(m.shared_any_tokens, r.prompt_tokens - 1)
GROUP BY p.arrival_seq
ORDER BY p.arrival_seq;
