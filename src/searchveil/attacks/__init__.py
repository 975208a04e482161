"""Attack simulators."""
