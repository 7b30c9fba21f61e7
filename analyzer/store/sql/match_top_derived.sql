-- The derived prompt family (not 'unshared') that labels the most requests, and how many.
SELECT prompt_family, count(*) AS requests
FROM requests
WHERE prompt_family_source = 'derived:first_junction' AND prompt_family <> 'unshared'
GROUP BY 1
ORDER BY 2 DESC, 1
LIMIT 1;
