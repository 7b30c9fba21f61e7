-- A host KV tier's figures per run (`hpa report`, docs/definitions.md#the-host-kv-tier), over
-- measured requests: prompt, hit (GPU + host) and host hit tokens, what the tier did not give
-- back beyond its hit (stored then evicted, never stored), the requests that waited
-- for a load with their mean and p99 wait, and TTFT p99 (NULL for a serial run). The report
-- keeps the runs whose policy sizes a tier and the points of host_tier_gib sweeps.
SELECT
    r.run_id,
    r.policy,
    sum(q.prompt_tokens)::BIGINT AS prompt_tokens,
    sum(q.hit_tokens)::BIGINT AS hit_tokens,
    sum(q.host_hit_tokens)::BIGINT AS host_hit_tokens,
    sum(q.host_evicted_tokens)::BIGINT AS host_evicted_tokens,
    sum(q.host_never_stored_tokens)::BIGINT AS host_never_stored_tokens,
    sum(q.host_never_stored_no_slot_tokens)::BIGINT AS host_never_stored_no_slot_tokens,
    sum(q.host_never_stored_decode_tokens)::BIGINT AS host_never_stored_decode_tokens,
    sum(q.host_never_stored_sparse_tokens)::BIGINT AS host_never_stored_sparse_tokens,
    count(*) FILTER (WHERE q.host_wait_steps > 0) AS host_waited_requests,
    avg(q.host_wait_s) FILTER (WHERE q.host_wait_steps > 0) AS host_wait_mean_s,
    quantile_cont(q.host_wait_s, 0.99) FILTER (WHERE q.host_wait_steps > 0) AS host_wait_p99_s,
    quantile_cont(q.ttft_s, 0.99) AS ttft_p99_s
FROM replay_runs AS r
JOIN replay_requests AS q ON q.run_id = r.run_id AND q.measured
GROUP BY r.run_id, r.policy
ORDER BY r.run_id;
