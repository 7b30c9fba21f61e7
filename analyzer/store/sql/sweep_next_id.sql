-- The next sweep id: above every stored sweep and every point a sweep left.
SELECT greatest(
    (SELECT coalesce(max(sweep_id), 0) FROM sweeps),
    (SELECT coalesce(max(sweep_id), 0) FROM sweep_points)
) + 1;
