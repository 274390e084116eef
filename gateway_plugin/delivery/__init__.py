"""Sequencing and the durable outbox: turns to canonical events, message ids, cron delivery."""
