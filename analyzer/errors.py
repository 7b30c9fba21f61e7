"""Error types of the library; the CLI turns each into a one-line message and exit code."""

from __future__ import annotations


class AnalyzerError(Exception):
    """Base of every error caused by user input or configuration (never a bug)."""

    exit_code = 1


class InputFileError(AnalyzerError):
    """A file that does not exist, cannot be read, or cannot be parsed at all."""

    exit_code = 2


class ConfigError(AnalyzerError):
    """An option, policy key or value that is not allowed."""

    exit_code = 2


class StoreError(AnalyzerError):
    """The DuckDB file is missing, from another version, or lacks a needed table."""


class BackendUnavailable(AnalyzerError):
    """An array backend (e.g. CuPy) was demanded but cannot be used here."""

    exit_code = 2
