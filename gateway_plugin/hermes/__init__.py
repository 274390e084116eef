"""The one Hermes seam: every Hermes import, the adapter, state.db reads, setup."""
