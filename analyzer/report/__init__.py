"""Outputs for people: CLI tables now; HTML, Prometheus and exports as they land."""
