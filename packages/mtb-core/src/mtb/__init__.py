"""MiniTrainBench core.

Plugin authors import ``mtb.hookimpl`` to mark their hook implementations.
Importing this package must stay cheap: no torch here.
"""

from importlib.metadata import PackageNotFoundError, version

from mtb.hookspecs import hookimpl

try:
    __version__ = version("mtb-core")
except PackageNotFoundError:  # running from a source tree without metadata
    __version__ = "0.0.0+unknown"

__all__ = ["__version__", "hookimpl"]
