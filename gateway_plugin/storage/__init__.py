"""SQLite files: how every plugin database is opened."""
