"""Config fields as flat command-line parameter names, and back.

``[launch] nproc_per_node`` is the click parameter ``launch__nproc_per_node``;
:func:`flags_from` turns such parameters back into the TOML-shaped dict that
``config.resolve`` takes. It lives below the CLI so that what only needs the
mapping (a matrix cell resolving its flags) does not import the CLI.
"""

from mtb.config import OPTION_SECTIONS, SECTIONS

SEPARATOR = "__"


def flags_from(params: dict) -> dict:
    """Click's flat parameters back into the TOML-shaped dict ``config.resolve`` takes."""
    flags: dict = {section: {} for section in [*SECTIONS, *OPTION_SECTIONS]}
    for name, value in params.items():
        if SEPARATOR in name:
            section, key = name.split(SEPARATOR, 1)
            flags[section][key] = value
        else:
            flags[name] = value
    return flags
