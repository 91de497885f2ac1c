"""Gradient synchronisation under accumulation: requested vs resolved modes."""

from mtb.api import SYNC_MODES, ConfigError

USER_MODES = tuple(m for m in SYNC_MODES if m != "auto")


def resolve_sync_mode(requested: str, default: str, allowed: tuple[str, ...], strategy: str):
    """The mode a strategy will use for ``requested`` (``auto`` takes its default)."""
    resolved = default if requested == "auto" else requested
    if resolved not in allowed:
        raise ConfigError(
            "training.gradient_sync_mode",
            f"{requested!r} is not supported by strategy {strategy!r}; "
            f"allowed: {', '.join(['auto', *(a for a in allowed if a in USER_MODES)])}",
        )
    return resolved
