-- The traffic shape of one side of `hpa compare`: run $run_id's measured requests (those with
-- $start <= timestamp_s < $end when $windowed). Prompt lengths in tokens; span in seconds
-- of timestamp_s (NULL without timestamps); families and revisions count distinct labels.
SELECT
    count(*) AS requests,
    sum(r.prompt_tokens)::BIGINT AS prompt_tokens,
    avg(r.prompt_tokens)::DOUBLE AS mean_prompt_tokens,
    quantile_disc(r.prompt_tokens, 0.5) AS p50_prompt_tokens,
    quantile_disc(r.prompt_tokens, 0.9) AS p90_prompt_tokens,
    max(r.prompt_tokens) AS max_prompt_tokens,
    (max(r.timestamp_s) - min(r.timestamp_s))::DOUBLE AS span_s,
    count(DISTINCT r.prompt_family) AS prompt_families,
    count(DISTINCT r.model_revision) AS model_revisions,
    count(DISTINCT q.conversation_id) AS conversations
FROM replay_requests AS r
LEFT JOIN requests AS q ON q.request_id = r.request_id
WHERE r.run_id = $run_id AND r.measured  -- warm-up requests (--measure-from) are not counted
    AND (NOT $windowed OR (r.timestamp_s >= $start AND r.timestamp_s < $end));
