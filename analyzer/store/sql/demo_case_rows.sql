-- Per request of the only run, in arrival order (`hpa demo`'s worked cases).
SELECT hit_tokens, sparse_retention_miss_tokens
FROM replay_requests
ORDER BY arrival_seq;
