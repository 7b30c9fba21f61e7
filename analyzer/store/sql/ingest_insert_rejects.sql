-- One rejected record: source, path, line, field, reason, raw excerpt.
INSERT INTO rejects VALUES (?, ?, ?, ?, ?, ?);
