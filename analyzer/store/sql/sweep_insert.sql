INSERT INTO sweeps VALUES (?, ?, ?, current_timestamp)
