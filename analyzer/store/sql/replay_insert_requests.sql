INSERT INTO replay_requests BY NAME SELECT * FROM replay_rows
