"""Maintenance jobs: retention sweeps (arq cron, ``unique=True``)."""
