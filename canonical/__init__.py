"""The cross-process contract shared by the plugin, the edges and the workers.

Canonical commands and events, bus keys and envelopes, and settings. Nothing here
imports Hermes, so edges and workers can run on machines without it.
"""
