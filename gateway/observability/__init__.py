"""Metrics, logs and the small HTTP endpoint operators scrape."""
