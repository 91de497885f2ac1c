"""Reports over MiniTrainBench result documents.

Markdown, CSV and HTML reporters, plots, the ``mtb report ...`` commands
and the evidence manifest. Importing this package must stay cheap: no
torch, ever (reports read result files only).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mtb-report")
except PackageNotFoundError:  # running from a source tree without metadata
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
