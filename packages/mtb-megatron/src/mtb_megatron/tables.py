"""The tables the commands print (rich), from the result documents alone."""

from rich.table import Table


def _number(value, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def runs_table(document: dict) -> Table:
    """One row per launch: topology, status and why, time per iteration, throughput, loss,
    and the highest rank's peak allocated memory (Megatron's report_memory)."""
    evidence = document["evidence"]
    verdict = "performance-valid" if document["performance_valid"] else "not performance-valid"
    table = Table(title=f"Megatron {document['mode']} ({evidence} evidence, {verdict})")
    columns = ("topology", "TPxPPxDP", "repeat", "status", "ms/iter", "TFLOP/s/GPU", "lm loss")
    for name in (*columns, "max alloc MB"):
        table.add_column(name, justify="left" if name in ("topology", "status") else "right")
    table.add_column("failure / log line")
    for run in document["runs"]:
        if run["performance_valid"]:
            throughput = _number(run["throughput_tflops_per_gpu"])
        else:
            throughput = "withheld"
        failure = f"{run['failure_kind']}: {run['failure_line'] or ''}" if run["failure"] else ""
        table.add_row(
            run["topology"],
            f"{run['tp']}x{run['pp']}x{run['dp']}",
            str(run["repeat"]),
            run["status"],
            _number(run["elapsed_ms_per_iteration"]),
            throughput,
            _number(run["lm_loss"], 4),
            _number(run["max_allocated_mb"]),
            failure,
        )
    return table


def reasons_lines(document: dict) -> list[str]:
    """Why the throughput is withheld, one reason a line."""
    return [f"not performance-valid: {reason}" for reason in document["performance_reasons"]]


def topology_table(document: dict) -> Table:
    """One row per topology: the groups checked and the mismatches found."""
    world = document["config"]["world_size"]
    table = Table(title=f"megatron-core parallel groups vs mtb's layout, world size {world}")
    for name in ("topology", "TPxPPxDP", "ranks", "mismatches", "ok"):
        table.add_column(name, justify="left" if name == "topology" else "right")
    for row in document["checks"]:
        table.add_row(
            row["topology"],
            f"{row['tp']}x{row['pp']}x{row['dp']}",
            str(row["ranks_checked"]),
            str(row["mismatches"]),
            "yes" if row["ok"] else "NO",
        )
    return table
