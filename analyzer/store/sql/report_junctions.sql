-- `hpa report`: what happened at each shared junction, per run. Relation
-- report_junction_paths(arrival_seq, junction_id) gives each request's deepest junction
-- within its shared prefix (analyzer/report/data.py). Outcomes in arrival order give the
-- "miss, sparse miss, hit" signature of a junction. The conversations and the first requests
-- pinned there (arrival order) say whose traffic a junction is, without SQL.
SELECT
    r.run_id,
    p.junction_id,
    any_value(j.position_tokens) AS position_tokens,
    any_value(j.num_requests_through) AS num_requests_through,
    any_value(j.num_branches) AS num_branches,
    array_to_string(any_value(j.prompt_families), ', ') AS prompt_families,
    array_to_string(any_value(j.model_revisions), ', ') AS model_revisions,
    count(*) AS num_requests_pinned,
    count(*) FILTER (WHERE r.sparse_retention_miss_tokens > 0) AS num_sparse_miss_requests,
    count(*) FILTER (WHERE r.hit_tokens > 0) AS num_hit_requests,
    sum(r.sparse_retention_miss_tokens)::BIGINT AS sparse_retention_miss_tokens,
    sum(r.hit_tokens)::BIGINT AS hit_tokens,
    sum(r.prompt_tokens)::BIGINT AS prompt_tokens,
    array_to_string(list(
        CASE WHEN r.sparse_retention_miss_tokens > 0 THEN 'sparse miss'
             WHEN r.hit_tokens > 0 THEN 'hit' ELSE 'miss' END
        ORDER BY r.arrival_seq)[1:5], ', ') AS first_outcomes,
    count(DISTINCT q.conversation_id) AS num_conversations,
    array_to_string(list(DISTINCT q.conversation_id ORDER BY q.conversation_id)[1:3], ', ')
        AS conversations,
    array_to_string(list(r.request_id ORDER BY r.arrival_seq)[1:5], ', ') AS first_requests
FROM replay_requests AS r
JOIN report_junction_paths AS p ON p.arrival_seq = r.arrival_seq
JOIN requests AS q ON q.arrival_seq = r.arrival_seq
JOIN junctions AS j ON j.junction_id = p.junction_id
WHERE list_contains($runs, r.run_id)
GROUP BY r.run_id, p.junction_id
ORDER BY r.run_id, sparse_retention_miss_tokens DESC, num_requests_through DESC, p.junction_id;
