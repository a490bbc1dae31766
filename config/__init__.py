"""Settings: one typed object from ``REM_*`` environment variables and an optional TOML file."""

from config.settings import DEFAULT_SEMANTIC_TYPES, ConfigError, Settings, idle_settings, load_settings, unknown_environment

__all__ = ["DEFAULT_SEMANTIC_TYPES", "ConfigError", "Settings", "idle_settings", "load_settings", "unknown_environment"]
