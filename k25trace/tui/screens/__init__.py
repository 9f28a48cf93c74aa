"""Screens of the k25trace TUI: overview, steps, step, kernel, search, SQL, help."""
