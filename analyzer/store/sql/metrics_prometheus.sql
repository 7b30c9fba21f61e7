-- Replayed prefix-cache counters of run $run_id per prompt family x model revision
-- (`hpa metrics`), over its measured requests (as `hpa replay` prints them). NULL labels
-- become '(none)', as in replay_summary. hit_tokens holds a host KV tier's hits; vLLM's
-- prefix_cache_hits is the GPU's part (hit - host hit).
SELECT
    coalesce(prompt_family, '(none)') AS prompt_family,
    coalesce(model_revision, '(none)') AS model_revision,
    count(*) AS requests,
    sum(prompt_tokens)::BIGINT AS prompt_tokens,
    sum(hit_tokens)::BIGINT AS hit_tokens,
    sum(sparse_retention_miss_tokens)::BIGINT AS sparse_retention_miss_tokens,
    sum(unshared_tokens)::BIGINT AS unshared_tokens,
    sum(lost_routing_tokens)::BIGINT AS lost_routing_tokens,
    sum(lost_granularity_tokens)::BIGINT AS lost_granularity_tokens,
    sum(lost_in_flight_tokens)::BIGINT AS lost_in_flight_tokens,
    sum(lost_eviction_tokens)::BIGINT AS lost_eviction_tokens,
    sum(sparse_retention_miss_never_kept_tokens)::BIGINT
        AS sparse_retention_miss_never_kept_tokens,
    sum(sparse_retention_miss_evicted_tokens)::BIGINT AS sparse_retention_miss_evicted_tokens,
    sum(lost_spec_decode_tokens)::BIGINT AS lost_spec_decode_tokens,
    sum(host_hit_tokens)::BIGINT AS host_hit_tokens,
    sum(host_evicted_tokens)::BIGINT AS host_evicted_tokens,
    sum(host_never_stored_tokens)::BIGINT AS host_never_stored_tokens,
    sum(host_never_stored_no_slot_tokens)::BIGINT AS host_never_stored_no_slot_tokens,
    sum(host_never_stored_decode_tokens)::BIGINT AS host_never_stored_decode_tokens,
    sum(host_never_stored_sparse_tokens)::BIGINT AS host_never_stored_sparse_tokens,
    count(*) FILTER (WHERE host_wait_steps > 0) AS host_loads,
    sum(host_wait_steps)::BIGINT AS host_wait_steps,
    coalesce(sum(host_wait_s), 0)::DOUBLE AS host_wait_s
FROM replay_requests
WHERE run_id = $run_id AND measured  -- warm-up requests (--measure-from) are not counted
GROUP BY ALL
ORDER BY 1, 2;
