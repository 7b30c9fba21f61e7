-- Per prompt family x model revision: what the store holds.
SELECT
    coalesce(prompt_family, '(none)') AS prompt_family,
    coalesce(model_revision, '(none)') AS model_revision,
    count(*) AS num_requests,
    sum(prompt_tokens) AS prompt_tokens,
    sum(coalesce(output_tokens, 0)) AS output_tokens,
    count(DISTINCT conversation_id) AS num_conversations
FROM requests
GROUP BY ALL
ORDER BY prompt_tokens DESC, prompt_family, model_revision;
