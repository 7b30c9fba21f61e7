-- The derived prompt family (not 'below-min-family-tokens', the requests with no junction at
-- >= --min-family-tokens) that labels the most requests, and how many.
SELECT prompt_family, count(*) AS requests
FROM requests
WHERE prompt_family_source = 'derived:first_junction' AND prompt_family <> 'below-min-family-tokens'
GROUP BY 1
ORDER BY 2 DESC, 1
LIMIT 1;
