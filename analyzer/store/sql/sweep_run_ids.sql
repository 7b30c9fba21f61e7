-- The replay runs that are points of a sweep.
SELECT DISTINCT run_id
FROM sweep_points;
