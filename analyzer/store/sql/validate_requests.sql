-- `hpa validate`: run $run_id's requests (those with $start <= timestamp_s < $end when
-- $windowed) per prompt family x model revision, beside what the engine observed
-- (temp view observed_requests: request_id, cached_tokens; NULL = not observed).
-- The first sums compare requests that have cached_tokens; the last three are the
-- replay's totals over every request of the window (for the /metrics counters). A request's
-- cached_tokens counts a host KV tier's hits (vLLM's num_cached_tokens: local + external), its
-- prefix_cache_hits counter does not, so the counters' hit_tokens is the GPU's part.
SELECT
    coalesce(r.prompt_family, '(none)') AS prompt_family,
    coalesce(r.model_revision, '(none)') AS model_revision,
    count(*) AS requests,
    count(o.cached_tokens) AS observed_requests,
    coalesce(sum(o.cached_tokens), 0)::BIGINT AS observed_tokens,
    coalesce(sum(r.hit_tokens) FILTER (WHERE o.cached_tokens IS NOT NULL), 0)::BIGINT
        AS predicted_tokens,
    coalesce(sum(abs(r.hit_tokens - o.cached_tokens)), 0)::BIGINT AS abs_error_tokens,
    count(*) FILTER (WHERE r.hit_tokens = o.cached_tokens) AS exact_requests,
    sum(r.prompt_tokens)::BIGINT AS prompt_tokens,
    sum(r.hit_tokens - r.host_hit_tokens)::BIGINT AS hit_tokens,
    sum(r.sparse_retention_miss_tokens)::BIGINT AS sparse_retention_miss_tokens
FROM replay_requests AS r
LEFT JOIN observed_requests AS o ON o.request_id = r.request_id
WHERE r.run_id = $run_id
    AND (NOT $windowed OR (r.timestamp_s >= $start AND r.timestamp_s < $end))
GROUP BY ALL
ORDER BY 1, 2;
