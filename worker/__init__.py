"""Composition and operations: the REM cycle, the daemon, the CLI, health/metrics and logging."""
