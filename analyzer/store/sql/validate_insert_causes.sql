-- Append the registered relation `validation_cause_rows` as validation $validation_id's causes.
INSERT INTO validation_causes
SELECT $validation_id, *
FROM validation_cause_rows;
