-- The id of the next validation.
SELECT coalesce(max(validation_id), 0) + 1
FROM validations;
