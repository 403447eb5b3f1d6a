"""The package version, in one place (the top package, its API and the service read it)."""

__version__ = "0.1.0"
