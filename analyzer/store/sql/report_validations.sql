-- `hpa validate`'s overall rows for the runs $runs (the report's validation section): per
-- validation, each compared figure's observed and predicted tokens and the error.
SELECT validation_id, run_id, window_start_s, window_end_s, source, figure, requests,
       observed_tokens, predicted_tokens, error_tokens, relative_error, exact_share
FROM validations
WHERE list_contains($runs, run_id) AND prompt_family = '(all)' AND model_revision = '(all)'
ORDER BY validation_id, source, figure;
