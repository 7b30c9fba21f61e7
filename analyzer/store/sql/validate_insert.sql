-- Append the registered relation `validation_rows` as validation $validation_id of run $run_id.
INSERT INTO validations
SELECT $validation_id, $run_id, current_timestamp, $window_start_s, $window_end_s,
       $metrics_before, $metrics_after, $model_name, *
FROM validation_rows;
