-- The aggregates of docs/definitions.md#aggregates per prompt family x model revision for run $run_id: token sums,
-- token-weighted ratios (sums divided), and request-weighted figures beside them. A host KV
-- tier's hits are part of hit_tokens; its waits are over the requests that waited for a load.
-- Only measured requests count (warm-up ones, before --measure-from, are excluded).
INSERT INTO replay_summary
SELECT
    $run_id,
    coalesce(prompt_family, '(none)'),
    coalesce(model_revision, '(none)'),
    count(*),
    sum(prompt_tokens),
    sum(hit_tokens),
    sum(sparse_retention_miss_tokens),
    sum(sparse_retention_miss_never_kept_tokens),
    sum(sparse_retention_miss_evicted_tokens),
    sum(unshared_tokens),
    sum(lost_routing_tokens),
    sum(lost_granularity_tokens),
    sum(lost_eviction_tokens),
    sum(lost_spec_decode_tokens),
    sum(fresh_prefill_tokens),
    sum(hit_tokens) / sum(prompt_tokens),
    sum(sparse_retention_miss_tokens) / sum(prompt_tokens),
    (sum(hit_tokens) + sum(sparse_retention_miss_tokens)) / sum(prompt_tokens),
    avg(hit_tokens / prompt_tokens),
    quantile_cont(hit_tokens / prompt_tokens, 0.5),
    quantile_cont(hit_tokens / prompt_tokens, 0.9),
    sum(replay_tokens),
    sum(lost_in_flight_tokens),
    quantile_cont(ttft_s, 0.5),
    quantile_cont(ttft_s, 0.9),
    quantile_cont(ttft_s, 0.99),
    avg(queue_s),
    sum(num_preemptions),
    sum(recomputed_tokens),
    sum(host_hit_tokens),
    sum(host_hit_tokens) / sum(prompt_tokens),
    count(*) FILTER (WHERE host_wait_steps > 0),
    avg(host_wait_s) FILTER (WHERE host_wait_steps > 0),
    quantile_cont(host_wait_s, 0.99) FILTER (WHERE host_wait_steps > 0),
    sum(host_evicted_tokens),
    sum(host_never_stored_tokens),
    sum(host_never_stored_no_slot_tokens),
    sum(host_never_stored_decode_tokens),
    sum(host_never_stored_sparse_tokens)
FROM replay_requests
WHERE run_id = $run_id AND measured
GROUP BY ALL
ORDER BY 2, 3;
