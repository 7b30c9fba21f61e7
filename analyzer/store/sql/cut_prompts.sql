-- Stored prompts that a server log may have cut, per length: (log_cut_tokens, requests).
SELECT log_cut_tokens, count(*) AS requests
FROM requests
WHERE log_cut_tokens IS NOT NULL
GROUP BY log_cut_tokens
ORDER BY log_cut_tokens;
