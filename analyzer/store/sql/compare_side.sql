-- One side of `hpa compare`: run $run_id's measured requests (as `hpa replay` prints them;
-- those with $start <= timestamp_s < $end when $windowed), summed per prompt family x model revision. NULL labels become '(none)'.
-- sim_*: the simulated TTFT and queue time of a concurrent run (none for a serial one).
-- host_*: a host KV tier's hits (part of hit_tokens), the requests that waited for a load, and
-- what it did not give back beyond its hits (stored then evicted, never stored).
SELECT
    coalesce(r.prompt_family, '(none)') AS prompt_family,
    coalesce(r.model_revision, '(none)') AS model_revision,
    count(*) AS requests,
    sum(r.prompt_tokens)::BIGINT AS prompt_tokens,
    sum(r.hit_tokens)::BIGINT AS hit_tokens,
    sum(r.unshared_tokens)::BIGINT AS unshared_tokens,
    sum(r.lost_routing_tokens)::BIGINT AS lost_routing_tokens,
    sum(r.lost_granularity_tokens)::BIGINT AS lost_granularity_tokens,
    sum(r.lost_in_flight_tokens)::BIGINT AS lost_in_flight_tokens,
    sum(r.lost_eviction_tokens)::BIGINT AS lost_eviction_tokens,
    sum(r.sparse_retention_miss_tokens)::BIGINT AS sparse_retention_miss_tokens,
    sum(r.sparse_retention_miss_never_kept_tokens)::BIGINT
        AS sparse_retention_miss_never_kept_tokens,
    sum(r.sparse_retention_miss_evicted_tokens)::BIGINT AS sparse_retention_miss_evicted_tokens,
    sum(r.lost_spec_decode_tokens)::BIGINT AS lost_spec_decode_tokens,
    sum(r.fresh_prefill_tokens)::BIGINT AS fresh_prefill_tokens,
    count(q.ttft_ms) AS ttft_requests,
    coalesce(sum(q.ttft_ms), 0)::DOUBLE AS ttft_ms_sum,
    count(r.ttft_s) AS sim_requests,
    coalesce(sum(r.ttft_s), 0)::DOUBLE AS sim_ttft_s_sum,
    coalesce(sum(r.queue_s), 0)::DOUBLE AS sim_queue_s_sum,
    sum(r.host_hit_tokens)::BIGINT AS host_hit_tokens,
    count(*) FILTER (WHERE r.host_wait_steps > 0) AS host_waited_requests,
    coalesce(sum(r.host_wait_s) FILTER (WHERE r.host_wait_steps > 0), 0)::DOUBLE
        AS host_wait_s_sum,
    sum(r.host_evicted_tokens)::BIGINT AS host_evicted_tokens,
    sum(r.host_never_stored_tokens)::BIGINT AS host_never_stored_tokens,
    sum(r.host_never_stored_no_slot_tokens)::BIGINT AS host_never_stored_no_slot_tokens,
    sum(r.host_never_stored_decode_tokens)::BIGINT AS host_never_stored_decode_tokens,
    sum(r.host_never_stored_sparse_tokens)::BIGINT AS host_never_stored_sparse_tokens
FROM replay_requests AS r
LEFT JOIN requests AS q ON q.request_id = r.request_id
WHERE r.run_id = $run_id AND r.measured  -- warm-up requests (--measure-from) are not counted
    AND (NOT $windowed OR (r.timestamp_s >= $start AND r.timestamp_s < $end))
GROUP BY ALL
ORDER BY 1, 2;
