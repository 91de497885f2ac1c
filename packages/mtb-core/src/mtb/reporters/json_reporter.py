"""``json``: the canonical result document, one JSON object per command run."""

import json

from mtb.hookspecs import hookimpl
from mtb.reporting import Reporter


class JsonReporter(Reporter):
    name = "json"
    description = "result document as JSON (one object; a list for several)"
    suffix = ".json"

    def render(self, documents: list[dict]) -> str:
        payload = documents[0] if len(documents) == 1 else documents
        return json.dumps(payload, indent=2, sort_keys=False, allow_nan=False) + "\n"


@hookimpl
def mtb_register_reporters(register):
    register(JsonReporter())
