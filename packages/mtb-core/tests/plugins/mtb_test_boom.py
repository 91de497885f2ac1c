"""A reporter whose render raises: a plugin that fails after the result is written."""

from mtb import hookimpl
from mtb.reporting import Reporter


class Boom(Reporter):
    name = "boom"
    suffix = ".boom"

    def render(self, documents):
        raise ValueError("cannot render")


@hookimpl
def mtb_register_reporters(register):
    register(Boom())
