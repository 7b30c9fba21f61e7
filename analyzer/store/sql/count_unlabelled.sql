-- Requests without a prompt family (neither the trace's nor a derived one).
SELECT count(*) FROM requests WHERE prompt_family IS NULL;
