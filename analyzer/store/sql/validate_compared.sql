-- `hpa validate`'s error decomposition: run $run_id's requests with an observed cached_tokens
-- (temp view observed_requests), in the window when $windowed, in arrival order, with the
-- replay's hit and its loss causes (tokens) and what reported the observation: the source's
-- format and, for TraceLab, the provider (`extra.provider`).
SELECT
    r.request_id,
    coalesce(r.prompt_family, '(none)') AS prompt_family,
    coalesce(r.model_revision, '(none)') AS model_revision,
    r.prompt_tokens,
    o.cached_tokens AS observed_tokens,
    r.hit_tokens AS predicted_tokens,
    r.unshared_tokens,
    r.lost_routing_tokens,
    r.lost_in_flight_tokens,
    r.lost_granularity_tokens,
    r.lost_eviction_tokens,
    r.sparse_retention_miss_tokens,
    r.lost_spec_decode_tokens,
    s.format AS observed_format,
    CASE WHEN s.format = 'tracelab' THEN json_extract_string(q.extra, '$.provider') END
        AS observed_provider
FROM replay_requests AS r
JOIN observed_requests AS o ON o.request_id = r.request_id
JOIN requests AS q ON q.request_id = r.request_id
JOIN sources AS s ON s.source_id = q.source_id
WHERE r.run_id = $run_id
    AND o.cached_tokens IS NOT NULL
    AND (NOT $windowed OR (r.timestamp_s >= $start AND r.timestamp_s < $end))
ORDER BY r.arrival_seq, r.request_id;
