"""`hdgctl`: set up, run, pair and operate the device gateway (never imports Hermes)."""
