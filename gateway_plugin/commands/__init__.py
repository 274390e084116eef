"""Device commands: the stream reader, effectively-once records, handlers, decisions, preferences."""
