-- Hash-id requests per block size and file (store/caveats.py: traces of several sizes).
SELECT r.block_size, s.path, count(*) AS requests
FROM requests r
JOIN sources s USING (source_id)
WHERE r.block_size IS NOT NULL
GROUP BY ALL
ORDER BY 1, 2;
