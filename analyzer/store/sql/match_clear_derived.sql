-- Undo `hpa match --derive-families`: labels it wrote go back to none (the trace's own
-- families, source NULL or 'trace', stay), and derived_tables forgets them.
UPDATE requests
SET prompt_family = NULL, prompt_family_source = NULL
WHERE prompt_family_source LIKE 'derived:%';
DELETE FROM derived_tables WHERE table_name = 'requests.prompt_family';
