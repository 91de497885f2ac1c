"""A Slurm matrix's jobs: the record of them, each cell's batch job, and a result for each.

The record (``slurm/jobs.state`` under the output directory: JSON, named so
that ``mtb report DIR`` does not take it for a result; rewritten atomically
after every submission and state change) holds each cell's current job id
and every job id it has had. A job's own batch script moves its result into
``cells/``; a job that ended without one gets a result document with
Slurm's state and reason, created only where no result is (a job's result is
never replaced).
"""

import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

from mtb import provenance
from mtb.config import ConfigError
from mtb.errors import RunFailed, UsageError
from mtb.matrix import runner
from mtb.matrix.session import JOBS_RECORD, cell_argv, cell_timeout, result_path
from mtb.reporting import write_atomic
from mtb.slurm import scheduler, script, settings

#: an ended job's result may reach this machine's view of a shared file system late
RESULT_GRACE_S = 30.0
#: Slurm's end states as a cell status and error class
ENDED = {
    "TIMEOUT": ("timeout", "timeout"),
    "DEADLINE": ("timeout", "timeout"),
    "OUT_OF_MEMORY": ("oom", "oom"),
    "CANCELLED": ("failed", "cancelled"),
    "PREEMPTED": ("failed", "preempted"),
    "NODE_FAIL": ("failed", "node_fail"),
    "BOOT_FAIL": ("failed", "node_fail"),
}


def read_record(out: Path) -> dict:
    """The record, or an empty one; one line when it is not a record."""
    path = out / JOBS_RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"cells": {}}
    except (OSError, ValueError) as error:
        raise UsageError(f"--output-dir: {path} is unreadable: {error}") from None
    if not isinstance(record, dict) or not isinstance(record.get("cells"), dict):
        raise UsageError(f"--output-dir: {path} is not a record of Slurm jobs")
    return record


def write_record(out: Path, record: dict) -> None:
    (out / JOBS_RECORD).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out / JOBS_RECORD, json.dumps(record, indent=2) + "\n")


def job_name(spec, cell) -> str:
    return f"mtb.{spec.name}.{cell.id}"


def cell_settings(spec, plans) -> dict[str, settings.SlurmSettings]:
    """Each cell's resources, all checked before anything is submitted: a bad ``slurm_*``
    key or a checkpoint directory two cells would share is one line naming the cell."""
    defaults = settings.from_table(spec.slurm)
    chosen = {}
    for plan in plans:
        try:
            chosen[plan.cell.id] = settings.for_cell(defaults, plan.cell.options)
            if plan.cell.options.get("checkpoint_dir"):
                chosen[plan.cell.id].check_warning(cell_timeout(spec, plan))
        except ConfigError as error:
            key = error.field.replace("slurm.", settings.PREFIX, 1)
            raise UsageError(f"cell {plan.cell.id}: {key}: {error.message}") from None
    shared = Counter(
        str(p.cell.options["checkpoint_dir"]) for p in plans if p.cell.options.get("checkpoint_dir")
    )
    for directory, cells in shared.items():
        if cells > 1:
            raise UsageError(
                f"checkpoint_dir: {directory!r} is shared by {cells} cells; on Slurm each "
                "cell resumes from its own (give it per cell, e.g. as an axis)"
            )
    return chosen


def job_for(spec, plan, out: Path, chosen: settings.SlurmSettings) -> script.Job:
    """The Slurm job of one cell: its own flags, the matrix's timeout, the cell's resources."""
    cell = plan.cell
    options = cell.command_options
    return script.Job(
        name=job_name(spec, cell),
        command=tuple(spec.command.split()),
        argv=tuple(cell_argv(spec, plan)),
        nodes=int(options.get("nnodes", 1)),
        nproc_per_node=int(options.get("nproc_per_node", 1)),
        device=str(options.get("device", "auto")),
        timeout_s=cell_timeout(spec, plan),
        settings=chosen,
        result=str(result_path(out, cell).relative_to(out)),
        log_stem=cell.id,
        chdir=str(out.resolve()),
        checkpoints=bool(options.get("checkpoint_dir")) and spec.command == "run",
    )


def submit(job: script.Job, out: Path, cell_id: str) -> str:
    """Write the cell's batch script under slurm/ and sbatch it; the job id."""
    path = out / "slurm" / f"{cell_id}.sbatch"
    path.parent.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    write_atomic(path, script.render(job))
    return scheduler.submit(str(path), f"cell {cell_id}: sbatch")


def adoptable(spec, cell, out: Path, known: list[scheduler.JobState]) -> str | None:
    """A live job of this cell that the record lacks (its submitter died between ``sbatch``
    and the record): among the ``known`` jobs, same name and working directory, not ended.
    Two are one line."""
    name, workdir = job_name(spec, cell), str(out.resolve())
    live = [
        job.job_id
        for job in known
        if job.name == name and job.workdir == workdir and not job.terminal
    ]
    if len(live) > 1:
        raise UsageError(
            f"cell {cell.id}: jobs {' '.join(live)} all run it; cancel all but one "
            "(scancel) and resume again"
        )
    return live[0] if live else None


def ended_document(spec, cell, job: scheduler.JobState, out: Path) -> dict:
    """The result of a job that left none: Slurm's state and reason, the last error line."""
    status, kind = ENDED.get(job.state, ("failed", None))
    logged = runner.last_error(out / "logs" / f"{cell.id}.node0.log")
    reason = f" ({job.reason})" if job.reason else ""
    error = f"slurm job {job.job_id} ended {job.state}{reason}" + (f": {logged}" if logged else "")
    document = runner.own_document(spec.command, cell, status, error, exit_status(job))
    document["error_class"] = kind or document["error_class"]
    document["slurm"] = {
        "job_id": job.job_id,
        "state": job.state,
        "reason": job.reason,
        "exit_code": job.exit_code,
        "restarts": job.restarts,
    }
    return document


def exit_status(job: scheduler.JobState) -> int | None:
    """The batch script's exit status from Slurm's ``STATUS:SIGNAL``."""
    status = (job.exit_code or "").split(":")[0]
    return int(status) if status.isdigit() else None


def collect(spec, cell, job: scheduler.JobState, out: Path) -> dict:
    """An ended job's result: the one its script moved into place (waited for up to
    RESULT_GRACE_S after a clean end), else one made here."""
    path = result_path(out, cell)
    grace = RESULT_GRACE_S if job.state == "COMPLETED" and exit_status(job) == 0 else 0.0
    deadline = time.monotonic() + grace
    while (document := _listed_result(path)) is None and time.monotonic() < deadline:
        time.sleep(1.0)
    if document is None:
        document = ended_document(spec, cell, job, out)
        if not _create(path, json.dumps(document, indent=2) + "\n"):
            document = runner.complete(path) or document
    return document


def _listed_result(path: Path) -> dict | None:
    """The result at ``path``, listing its folder first (a listing refreshes what a network
    file system's client knows of it)."""
    if path.parent.is_dir():
        os.listdir(path.parent)
    return runner.complete(path)


def _create(path: Path, text: str) -> bool:
    """Write ``path`` whole unless it exists (a link fails where a file is): whether it did."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        tmp.write(text)
    try:
        os.link(tmp.name, path)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp.name)
    return True


def recorded(out: Path) -> dict[str, str]:
    """cell id -> its latest job id (a cancelled one too); one line when no job was ever
    submitted."""
    cells = read_record(out)["cells"]
    jobs = {cell: entry["jobs"][-1] for cell, entry in cells.items() if entry.get("jobs")}
    if not jobs:
        raise UsageError(f"OUTPUT_DIR: {out} holds no submitted Slurm job ({JOBS_RECORD})")
    return jobs


def job_states(out: Path, detailed: bool = False) -> dict[str, scheduler.JobState]:
    """cell id -> what Slurm says of its job now (``detailed``: with restarts)."""
    jobs = recorded(out)
    scheduler.check_reachable()
    found = scheduler.states(list(jobs.values()), detailed)
    return {cell: found[job] for cell, job in jobs.items()}


def cancel(out: Path, timeout_s: float = 120.0) -> list[str]:
    """scancel the jobs not yet ended and wait until Slurm reports each ended; their cells
    keep no job, so that ``--resume`` submits them again. The ids cancelled."""
    live = {cell: job.job_id for cell, job in job_states(out).items() if not job.terminal}
    scheduler.cancel(list(live.values()))
    waiting, deadline = list(live.values()), time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        time.sleep(0.5)
        waiting = [j.job_id for j in scheduler.states(waiting).values() if not j.terminal]
    record = read_record(out)
    for cell in live:
        record["cells"][cell].update(job_id=None, state="CANCELLED", cancelled=provenance.utc_now())
    write_record(out, record)
    if waiting:
        raise RunFailed(f"cancel: jobs {' '.join(waiting)} still not ended after {timeout_s:g} s")
    return list(live.values())
