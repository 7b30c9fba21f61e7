-- The rows of validation $validation_id as `hpa validate --out` writes them.
SELECT * EXCLUDE (validation_id, created_at)
FROM validations
WHERE validation_id = $validation_id
ORDER BY rowid;
