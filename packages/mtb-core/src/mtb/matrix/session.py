"""A whole matrix: plans, resume, one cell after another, progress, document and report.

The matrix document (``matrix.json``) is rewritten after every cell, so an
interrupted matrix leaves an honest partial one; ``--resume`` reuses every
cell whose result file is complete and runs the rest.
"""

import contextlib
import json
import signal
from pathlib import Path

from mtb import provenance
from mtb.errors import RunFailed, UsageError
from mtb.matrix import records, runner
from mtb.matrix.plan import plan_cell
from mtb.reporting import write_atomic

REPORTER = "markdown"
#: where a Slurm matrix records its jobs (mtb.matrix.slurm_jobs)
JOBS_RECORD = Path("slurm") / "jobs.state"


class Interrupted(Exception):
    """SIGTERM or Ctrl-C while a cell ran."""


def plans(spec, cells, cli, pm, machine) -> list:
    return [plan_cell(cell, spec.command, cli, pm, machine) for cell in cells]


def result_path(out: Path, cell) -> Path:
    return out / "cells" / f"{cell.id}.json"


def check_output_dir(out: Path, resume: bool) -> None:
    existing = list((out / "cells").glob("*.json")) if (out / "cells").is_dir() else []
    if existing and not resume:
        raise UsageError(
            f"--output-dir: {out} already holds {len(existing)} cell result(s); "
            "continue them with --resume or choose another directory"
        )
    if (out / JOBS_RECORD).exists() and not resume:
        raise UsageError(
            f"--output-dir: {out} already holds a matrix's Slurm jobs; "
            "re-attach with --resume, or see them with mtb matrix status"
        )


def cell_argv(spec, plan) -> list[str]:
    """The cell's flags, with the matrix's timeout when the command takes one."""
    argv = plan.cell.argv()
    if plan.takes_timeout and "timeout" not in plan.cell.options:
        argv += ["--timeout", f"{spec.timeout_s:g}"]
    return argv


def cell_timeout(spec, plan) -> float:
    """The cell's own ``timeout`` option, else the matrix's."""
    return float(plan.cell.options.get("timeout", spec.timeout_s))


def _raise_interrupted(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


def write_report(pm, out: Path, matrix: dict, documents: list[dict]) -> Path | None:
    """Markdown through the installed reporter (mtb-report), when there is one."""
    registry = pm.registry("reporter")
    if REPORTER not in registry.names():
        return None
    path = out / "report.md"
    write_atomic(path, registry.get(REPORTER).render([matrix, *documents]))
    return path


def run(spec, plan_list: list, out: Path, pm, progress) -> tuple[dict, Path | None]:
    """Run or reuse every cell: the matrix document (also at out/matrix.json), the report."""
    from mtb.documents import document_provenance, plugin_list

    plugins = plugin_list(pm)
    prov = document_provenance(plugins, started=provenance.utc_now(), finished=False)
    rows: list[dict] = []
    documents: list[dict] = []

    def save():
        matrix = records.document(spec, rows, len(plan_list), prov, plugins)
        write_atomic(out / "matrix.json", json.dumps(matrix, indent=2) + "\n")
        return matrix

    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for plan in plan_list:
            progress.start(plan.cell)
            path = result_path(out, plan.cell)
            if plan.skip:
                rows.append(records.skipped_row(plan))
                progress.finish(plan.cell, rows[-1], reused=False)
                continue
            reused = runner.complete(path)
            if reused is None:
                outcome = runner.run(
                    spec.command,
                    plan.cell,
                    cell_argv(spec, plan),
                    path,
                    cell_timeout(spec, plan),
                    out / "logs" / f"{plan.cell.id}.log",
                )
                document = outcome.document
                run_info = {
                    "reused": False,
                    "returncode": outcome.returncode,
                    "duration_s": round(outcome.duration_s, 3),
                    "process_peak_rss_bytes": outcome.process_peak_rss_bytes,
                }
            else:
                document, run_info = reused, {"reused": True}
            documents.append(document)
            rows.append(records.row(plan, document, str(path.relative_to(out)), **run_info))
            progress.finish(plan.cell, rows[-1], reused=reused is not None)
            save()
    except Interrupted as error:
        save()
        raise RunFailed(
            f"matrix interrupted by {error} after {len(rows)} of {len(plan_list)} cells; "
            f"continue with --resume --output-dir {out}"
        ) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    prov["end_utc"] = provenance.utc_now()
    with contextlib.suppress(OSError):  # empty once every cell is over
        (out / "running").rmdir()
    matrix = save()
    return matrix, write_report(pm, out, matrix, documents)
