"""Trace readers and formats: files in, canonical request records out."""
