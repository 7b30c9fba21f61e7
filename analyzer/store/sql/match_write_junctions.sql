-- Table junctions: the branch points of the prefix tree, from the relations
-- match_junction_nodes (one row per junction) and match_junction_paths (one row per
-- request and junction on its path) registered by `hpa match`. Definitions are in
-- analyzer/prefixes/junctions.py.
CREATE OR REPLACE TABLE junctions AS
WITH through AS (
    SELECT
        p.junction_idx,
        count(*) AS num_requests_through,
        max(p.arrival_seq) AS last_seq,
        list_sort(list_distinct(list(r.prompt_family))) AS prompt_families,
        list_sort(list_distinct(list(r.model_revision))) AS model_revisions
    FROM match_junction_paths AS p
    JOIN requests AS r ON r.arrival_seq = p.arrival_seq
    GROUP BY p.junction_idx
)
SELECT
    n.junction_id,
    n.position_tokens,
    t.num_requests_through,
    n.num_branches,
    n.num_requests_diverging,
    f.request_id AS first_request_id,
    l.request_id AS last_request_id,
    t.prompt_families,
    t.model_revisions,
    f.cache_salt,
    f.lora_name,
    h.block_size
FROM match_junction_nodes AS n
JOIN through AS t ON t.junction_idx = n.junction_idx
JOIN requests AS f ON f.arrival_seq = n.owner_seq
JOIN requests AS l ON l.arrival_seq = t.last_seq
-- hash-id requests' block size: as a filter, `IS NOT NULL` reads the lists' validity alone
-- (in a projection it would read every hash id)
LEFT JOIN (
    SELECT arrival_seq, block_size FROM requests WHERE block_hash_ids IS NOT NULL
) AS h ON h.arrival_seq = n.owner_seq
ORDER BY n.owner_seq, n.position_tokens;
