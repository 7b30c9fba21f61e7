-- A batch's rejected records (the Arrow table reject_rows): source, path, line, field,
-- reason, raw excerpt.
INSERT INTO rejects SELECT source_id, path, line_no, field, reason, raw_excerpt FROM reject_rows;
