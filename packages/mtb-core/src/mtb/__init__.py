"""MiniTrainBench core.

Plugin authors import ``mtb.hookimpl`` to mark their hook implementations.
Importing this package must stay cheap: no torch here.

``PLUGIN_API_VERSION`` is the version of what plugins may rely on: the hooks
of ``mtb.hookspecs`` and the names ``mtb.api`` exports. It is the MAJOR.MINOR
of the mtb-core releases that keep it: within them these only grow (new hooks,
new optional arguments, new names), and a change that can break a plugin
comes with a new minor release of mtb-core and a new API version. A plugin
depends on ``mtb-core>=0.2,<0.3`` for API 0.2.
"""

from importlib.metadata import PackageNotFoundError, version

from mtb.hookspecs import hookimpl

try:
    __version__ = version("mtb-core")
except PackageNotFoundError:  # running from a source tree without metadata
    __version__ = "0.0.0+unknown"

PLUGIN_API_VERSION = "0.2"

__all__ = ["PLUGIN_API_VERSION", "__version__", "hookimpl"]
