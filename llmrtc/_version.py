"""The package version, on floor 0 so every layer may read it without importing the face."""

__version__ = "0.1.0"
