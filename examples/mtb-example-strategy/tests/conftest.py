"""mtb's fixture for plugin tests: ``mtb_plugin(module)`` runs mtb with that plugin."""

from mtb.testing import mtb_plugin  # noqa: F401
