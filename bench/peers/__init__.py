"""Peer servers the fan-out benchmark compares the gateway against (not project code)."""
