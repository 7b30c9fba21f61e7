INSERT INTO sweeps (sweep_id, base_policy, knob, created_at, name)
VALUES (?, ?, ?, current_timestamp, ?)
