-- Every replay run with its totals (`hpa report`). num_caches: the pools its requests went
-- through, one per model revision x replica (per replica under cache_scope shared); memory
-- figures are per pool. measure_from: the warm-up left out of its figures (`--measure-from`).
SELECT
    r.run_id, r.policy, r.trace_fingerprint, r.num_requests, r.prompt_tokens, r.hit_tokens,
    r.hpa_version,
    (
        SELECT count(DISTINCT
            CASE WHEN json_extract_string(r.policy, '$.cache_scope') = 'shared'
                THEN q.replica
                ELSE coalesce(q.model_revision, '') || chr(0) || q.replica
            END)
        FROM replay_requests AS q
        WHERE q.run_id = r.run_id
    ) AS num_caches,
    r.name,
    r.measure_from
FROM replay_runs AS r
ORDER BY r.run_id;
