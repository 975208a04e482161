"""Attack simulators (Korolova thesis ch.2 and ch.6)."""
