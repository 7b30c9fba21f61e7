-- `hpa report`: loss waterfall sums per run and per run x prompt family x model revision.
-- Rows with is_overall = true are the run totals, over the measured requests (as `hpa replay`
-- prints them). $runs: the run ids to include.
-- Ratios of per-request figures (request-weighted means) are rounded so that the report
-- is byte-identical whatever order DuckDB's threads added them in.
SELECT
    run_id,
    grouping(prompt_family, model_revision) <> 0 AS is_overall,
    coalesce(prompt_family, 'no family') AS prompt_family,
    coalesce(model_revision, 'no revision') AS model_revision,
    count(*) AS num_requests,
    sum(prompt_tokens)::BIGINT AS prompt_tokens,
    sum(hit_tokens)::BIGINT AS hit_tokens,
    sum(unshared_tokens)::BIGINT AS unshared_tokens,
    sum(lost_routing_tokens)::BIGINT AS lost_routing_tokens,
    sum(lost_granularity_tokens)::BIGINT AS lost_granularity_tokens,
    sum(lost_in_flight_tokens)::BIGINT AS lost_in_flight_tokens,
    sum(lost_eviction_tokens)::BIGINT AS lost_eviction_tokens,
    sum(sparse_retention_miss_tokens)::BIGINT AS sparse_retention_miss_tokens,
    sum(sparse_retention_miss_never_kept_tokens)::BIGINT AS sparse_retention_miss_never_kept_tokens,
    sum(sparse_retention_miss_evicted_tokens)::BIGINT AS sparse_retention_miss_evicted_tokens,
    sum(lost_spec_decode_tokens)::BIGINT AS lost_spec_decode_tokens,
    sum(replay_tokens)::BIGINT AS replay_tokens,
    round(avg(hit_tokens / greatest(prompt_tokens, 1)), 9) AS mean_request_hit_ratio,
    round(avg(sparse_retention_miss_tokens / greatest(prompt_tokens, 1)), 9)
        AS mean_request_sparse_loss_ratio
FROM replay_requests
WHERE list_contains($runs, run_id) AND measured  -- warm-up requests (--measure-from) are not counted
GROUP BY GROUPING SETS ((run_id, prompt_family, model_revision), (run_id))
ORDER BY run_id, is_overall DESC, prompt_family, model_revision;
