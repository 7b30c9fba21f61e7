"""Replay: cache groups, the hybrid coordinator, policies; pure (records in, results out)."""
