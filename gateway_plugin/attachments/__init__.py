"""Attachments: the registry and file store, claims and deliverables, transcoding jobs."""
