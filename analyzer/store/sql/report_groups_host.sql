-- `hpa report`: a host KV tier's hits (part of hit_tokens) per run and per run x prompt
-- family x model revision, keyed as report_groups.sql's rows; read only where the store has
-- the column. $runs: the run ids to include.
SELECT
    run_id,
    grouping(prompt_family, model_revision) <> 0 AS is_overall,
    coalesce(prompt_family, 'no family') AS prompt_family,
    coalesce(model_revision, 'no revision') AS model_revision,
    sum(host_hit_tokens)::BIGINT AS host_hit_tokens
FROM replay_requests
WHERE list_contains($runs, run_id) AND measured  -- warm-up requests (--measure-from) are not counted
GROUP BY GROUPING SETS ((run_id, prompt_family, model_revision), (run_id))
ORDER BY run_id, is_overall DESC, prompt_family, model_revision;
