"""Exceptions that the CLI turns into one-line messages and exit codes.

Exit codes: 0 ok, 1 run failed, 2 usage or configuration error.
"""


class MtbError(Exception):
    """Base for errors that carry a message meant for the user."""

    exit_code = 1


class UsageError(MtbError):
    """Bad input: a flag, a config field, an unknown or unavailable plugin."""

    exit_code = 2


class ConfigError(UsageError):
    """A configuration field holds a value that is not allowed."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


class PluginError(UsageError):
    """A plugin failed to load (strict mode) or registered a clashing name."""


class RunFailed(MtbError):
    """A run started but did not finish: a worker failed or timed out."""
