"""Push delivery: FCM HTTP v1 and ntfy senders, pure response classification, and the
``push_notify`` job."""
