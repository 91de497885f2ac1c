"""Communication benchmarks for MiniTrainBench.

Adds the ``mtb comm``, ``mtb tp ...`` and ``mtb moe ...`` commands.
Importing this package must stay cheap: no torch at module level.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mtb-comm")
except PackageNotFoundError:  # running from a source tree without metadata
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
