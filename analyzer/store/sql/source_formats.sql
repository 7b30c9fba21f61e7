-- Requests stored per input format (the caveats of adapter-made fields, store/caveats.py).
SELECT format, sum(num_stored)::BIGINT AS requests
FROM sources
GROUP BY format
HAVING sum(num_stored) > 0
ORDER BY format;
