"""The doctor's JSON result (kind ``doctor``) and its table."""

import os

import attrs

from mtb.doctor import check as chk
from mtb.doctor import compute, connectivity, gpus, host, network, software, variables

STYLE = {chk.OK: "green", chk.WARN: "yellow", chk.FAIL: "bold red", chk.SKIPPED: "dim"}


def run_checks(launch, probe_bytes: int, skip_connectivity: bool) -> list[chk.Check]:
    """Every check, cheapest first; connectivity last because it launches workers."""
    names = sorted(network.interfaces())
    return [
        *software.checks(),
        *host.checks(),
        *gpus.checks(),
        *network.checks(),
        *variables.checks(dict(os.environ), names),
        *compute.checks(),
        *connectivity.checks(launch, probe_bytes, skip_connectivity),
    ]


def build(checks: list[chk.Check], launch, plugins: list[dict], started: str) -> dict:
    from mtb.documents import document_provenance, result_document

    verdict = chk.worst(checks)
    return result_document(
        "doctor",
        status="failed" if verdict == chk.FAIL else "ok",
        error=_first_failure(checks),
        verdict=verdict,
        counts={s: sum(c.status == s for c in checks) for s in chk.STATUSES},
        launch=attrs.asdict(launch),
        checks=[attrs.asdict(c) for c in checks],
        provenance=document_provenance(plugins, started=started),
    )


def _first_failure(checks: list[chk.Check]) -> str | None:
    failed = [c for c in checks if c.status == chk.FAIL]
    return f"{failed[0].name}: {failed[0].message}" if failed else None


def table(document: dict):
    from rich.table import Table
    from rich.text import Text

    grid = Table(title=f"mtb doctor: {document['verdict']}", title_justify="left")
    for column in ("area", "check", "status", "message"):
        grid.add_column(column, overflow="fold")
    for c in document["checks"]:
        status = Text(c["status"], style=STYLE[c["status"]])
        grid.add_row(c["area"], c["name"], status, c["message"])
    return grid
