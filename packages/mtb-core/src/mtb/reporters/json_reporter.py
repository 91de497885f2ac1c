"""``json`` and ``jsonl``: the canonical result document as JSON, and as a log of them.

``json`` writes one pretty-printed document per file (every run's result);
``jsonl`` appends each document as one line (JSON Lines), so one file can
collect many runs: ``mtb run --report jsonl:runs.jsonl`` or
``mtb report --append``.
"""

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


class JsonLinesReporter(Reporter):
    name = "jsonl"
    description = "one result document per line (JSON Lines), appended to the file"
    suffix = ".jsonl"
    appends = True

    def render(self, documents: list[dict]) -> str:
        return "".join(
            json.dumps(d, separators=(",", ":"), allow_nan=False) + "\n" for d in documents
        )


@hookimpl
def mtb_register_reporters(register):
    register(JsonReporter())
    register(JsonLinesReporter())
