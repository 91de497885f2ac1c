"""Whether a logger's library is installed, and how to install it when it is not."""

import importlib.util


def missing(module: str, extra: str) -> str | None:
    """None when ``module`` imports; otherwise the install command of the extra that brings it."""
    if importlib.util.find_spec(module) is not None:
        return None
    return f"{module} is not installed: pip install 'mtb-loggers[{extra}]'"
