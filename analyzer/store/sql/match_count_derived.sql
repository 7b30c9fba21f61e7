-- Requests whose prompt family `hpa match --derive-families` set, and distinct labels.
SELECT count(*), count(DISTINCT prompt_family)
FROM requests
WHERE prompt_family_source = 'derived:first_junction';
