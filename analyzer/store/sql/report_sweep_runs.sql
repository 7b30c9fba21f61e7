-- The runs that are sweep points (`hpa sweep`), with their sweep: the report draws them
-- only in its capacity section unless they are asked for by id.
SELECT run_id, sweep_id
FROM sweep_points
ORDER BY run_id;
