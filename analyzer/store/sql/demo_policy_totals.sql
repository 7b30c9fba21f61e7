-- Per replay run: tokens, the loss waterfall's sums in its order (the hits and causes add up
-- to prompt_tokens; the demo's replays are serial, so nothing is lost in flight) and the
-- ratios (`hpa demo`'s policy table).
SELECT run_id,
       sum(prompt_tokens) AS prompt_tokens,
       sum(hit_tokens) AS hit_tokens,
       sum(unshared_tokens) AS unshared_tokens,
       sum(lost_routing_tokens) AS lost_routing_tokens,
       sum(lost_granularity_tokens) AS lost_granularity_tokens,
       sum(lost_eviction_tokens) AS lost_eviction_tokens,
       sum(sparse_retention_miss_tokens) AS sparse_retention_miss_tokens,
       sum(lost_spec_decode_tokens) AS lost_spec_decode_tokens,
       sum(replay_tokens) AS replay_tokens,
       sum(hit_tokens) / sum(prompt_tokens) AS useful_hit_ratio,
       sum(sparse_retention_miss_tokens) / sum(prompt_tokens) AS sparse_loss_ratio
FROM replay_requests
GROUP BY run_id
ORDER BY run_id;
