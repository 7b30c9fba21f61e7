-- Derived prompt families (rule derived:first_junction, see analyzer/prefixes/labels.py):
-- every request without a family from the trace (or with an earlier derived one) gets the
-- label of the shallowest junction on its prompt path at >= $min_tokens tokens, or
-- 'below-min-family-tokens' (labels.NO_FAMILY_LABEL: it may share a shorter prefix, or none;
-- hpa wrote 'unshared' before). Needs match_junction_nodes and match_junction_paths registered.
UPDATE requests
SET prompt_family = coalesce(a.label, 'below-min-family-tokens'),
    prompt_family_source = 'derived:first_junction'
FROM (
    SELECT r.arrival_seq, d.label
    FROM requests AS r
    LEFT JOIN (
        SELECT p.arrival_seq, arg_min(n.family_label, n.position_tokens) AS label
        FROM match_junction_paths AS p
        JOIN match_junction_nodes AS n ON n.junction_idx = p.junction_idx
        WHERE p.on_prompt AND n.position_tokens >= $min_tokens
        GROUP BY p.arrival_seq
    ) AS d ON d.arrival_seq = r.arrival_seq
) AS a
WHERE requests.arrival_seq = a.arrival_seq
  AND (requests.prompt_family IS NULL OR requests.prompt_family_source LIKE 'derived:%');
