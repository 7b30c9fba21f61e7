-- The per-request error by cause of the validations $ids (`hpa validate`), causes that
-- explain anything, largest first.
SELECT validation_id, cause, engine_did, requests, error_tokens, share_of_abs_error
FROM validation_causes
WHERE list_contains($ids, validation_id) AND requests > 0
ORDER BY validation_id, share_of_abs_error DESC, cause;
