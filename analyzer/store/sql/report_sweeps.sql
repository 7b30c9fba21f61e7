-- Every sweep point (`hpa sweep`) for the report's sweep figures; the columns are
-- analyzer.report.data.SWEEP_COLUMNS (a store written before one existed shows no sweeps).
SELECT sweep_id, knob, value, run_id, useful_hit_ratio, sparse_loss_ratio, memory_gib
FROM sweep_points
ORDER BY sweep_id, knob, run_id;
