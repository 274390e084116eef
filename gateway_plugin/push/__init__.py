"""Push notifications: when to push, and deferred pushes that survive restarts."""
