"""Megatron-style parallelism tools for MiniTrainBench.

Adds the ``mtb megatron ...`` commands; topology checks against
Megatron-Core need the ``[megatron-core]`` extra.
Importing this package must stay cheap: no torch at module level.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mtb-megatron")
except PackageNotFoundError:  # running from a source tree without metadata
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
