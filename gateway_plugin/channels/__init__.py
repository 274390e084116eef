"""Channels and threads: the directory, thread titles, full-text search."""
