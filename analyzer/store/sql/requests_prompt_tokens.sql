-- Prompt tokens of every stored request (a scalar column: no list is read).
SELECT coalesce(sum(prompt_tokens), 0) AS prompt_tokens
FROM requests;
