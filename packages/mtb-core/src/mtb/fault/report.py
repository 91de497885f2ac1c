"""The smoke's JSON document (kind ``fault``) and its table on stdout."""

import json

from rich.table import Table
from rich.text import Text

from mtb.documents import document_provenance, plugin_list, result_document
from mtb.reporting import write_atomic


def document(smoke, outcomes, pm, started: str, seconds: float) -> dict:
    reference = smoke.reference_run
    return result_document(
        "fault",
        status="ok" if all(o.passed for o in outcomes) else "failed",
        strategy=smoke.strategy,
        workdir=str(smoke.workdir),
        seconds=round(seconds, 1),
        reference=None
        if reference is None
        else {"launch": reference.launch.evidence(), "state_digests": reference.digests},
        scenarios=[o.document() for o in outcomes],
        provenance=document_provenance(plugin_list(pm), started=started),
    )


def write(doc: dict, path: str) -> None:
    write_atomic(path, json.dumps(doc, indent=2) + "\n")


def table(doc: dict) -> Table:
    """One row per scenario: verdict, time, checks held, and what failed."""
    title = f"mtb fault smoke: {doc['strategy']}, {doc['seconds']:g} s, {doc['status']}"
    result = Table(title=title, min_width=60)
    for column in ("scenario", "result", "s", "checks", "failed checks"):
        result.add_column(column, justify="right" if column in ("s", "checks") else "left")
    for scenario in doc["scenarios"]:
        held = sum(c["ok"] for c in scenario["checks"])
        failed = [c["check"] for c in scenario["checks"] if not c["ok"]]
        failed += [scenario["error"]] if scenario["error"] else []
        result.add_row(
            scenario["name"],
            "PASS" if scenario["status"] == "passed" else Text("FAIL", style="bold red"),
            f"{scenario['seconds']:.1f}",
            f"{held}/{len(scenario['checks'])}",
            "; ".join(failed),
        )
    return result
