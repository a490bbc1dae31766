"""Adapters to the outside world: Chroma, the SQLite graph and run state, the lazy-edge queue.

No pipeline logic lives here; ``store`` imports only ``config``.
"""
