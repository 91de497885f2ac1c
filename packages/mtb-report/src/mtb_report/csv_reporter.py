"""``csv``: one row per result with raw, unformatted numbers, for spreadsheets and scripts."""

import csv
import io
import json

from mtb.api import Reporter
from mtb_report import grouping
from mtb_report.records import train_record

ENVIRONMENT = ("git_revision", "torch", "device_model", "image")


def row(document: dict) -> dict:
    """Environment and settings group first, so a reader never mixes what may not be mixed."""
    environment = dict(zip(ENVIRONMENT, grouping.environment_key(document), strict=True))
    record = train_record(document)
    record.pop("strategy")
    record["strategy_options"] = json.dumps(record["strategy_options"], sort_keys=True)
    return {
        "kind": document["kind"],
        "strategy": document.get("config", {}).get("strategy"),
        **environment,
        "settings": grouping.describe_settings(document) if document["kind"] == "train" else "",
        **record,
    }


class CsvReporter(Reporter):
    name = "csv"
    description = "one row per result document with raw numbers (environment and settings keyed)"
    suffix = ".csv"

    def render(self, documents: list[dict]) -> str:
        rows = [row(d) for d in documents]
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()
