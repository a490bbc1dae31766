"""The work: each step a module with a pure core and injected stores. Imports ``store`` and
``config`` only, never ``worker``."""
