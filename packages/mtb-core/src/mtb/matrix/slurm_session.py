"""A matrix on Slurm: each cell one job, the jobs recorded, watched, and their results collected.

The record (``slurm/jobs.state`` under the output directory: JSON, named so
that ``mtb report DIR`` does not take it for a result; rewritten atomically
after every submission and state change) holds each cell's job
id, so the matrix survives its submitter: ``--resume`` (from any machine that
shares the directory) re-attaches to pending and running jobs, collects the
finished ones, and submits only the cells no job has run. A job's own batch
script moves its result into ``cells/``; a job that ended without one gets a
result document with Slurm's state and reason.
"""

import contextlib
import json
import time
from pathlib import Path

from mtb import provenance
from mtb.console import stderr
from mtb.errors import Interrupted, RunFailed, UsageError
from mtb.matrix import records, runner
from mtb.matrix.session import _argv, _timeout, _write_report, result_path
from mtb.reporting import write_atomic
from mtb.slurm import scheduler, script, settings

RECORD = Path("slurm") / "jobs.state"
POLL_S = 5.0
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
    try:
        return json.loads((out / RECORD).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"cells": {}}
    except (OSError, ValueError) as error:
        raise UsageError(f"--output-dir: {out / RECORD} is unreadable: {error}") from None


def write_record(out: Path, record: dict) -> None:
    (out / RECORD).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out / RECORD, json.dumps(record, indent=2) + "\n")


def job_name(spec, cell) -> str:
    return f"mtb.{spec.name}.{cell.id}"


def job_for(spec, plan, out: Path, defaults: settings.SlurmSettings) -> script.Job:
    """The Slurm job of one cell: its own flags, the matrix's timeout, the cell's resources."""
    cell = plan.cell
    options = cell.command_options
    return script.Job(
        name=job_name(spec, cell),
        command=tuple(spec.command.split()),
        argv=tuple(_argv(spec, plan)),
        nodes=int(options.get("nnodes", 1)),
        nproc_per_node=int(options.get("nproc_per_node", 1)),
        device=str(options.get("device", "auto")),
        timeout_s=_timeout(spec, plan),
        settings=settings.for_cell(defaults, cell.options),
        result=str(result_path(out, cell).relative_to(out)),
        log_stem=cell.id,
        chdir=str(out.resolve()),
        checkpoints=bool(options.get("checkpoint_dir")) and spec.command == "run",
    )


def submit(spec, plan, out: Path, defaults) -> str:
    """Write the cell's batch script under slurm/ and sbatch it; the job id."""
    path = out / "slurm" / f"{plan.cell.id}.sbatch"
    path.parent.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    write_atomic(path, script.render(job_for(spec, plan, out, defaults)))
    return scheduler.submit(str(path), f"cell {plan.cell.id}: sbatch")


def ended_document(spec, cell, job: scheduler.JobState, out: Path) -> dict:
    """The result of a job that left none: Slurm's state and reason, the last error line."""
    status, kind = ENDED.get(job.state, ("failed", None))
    logged = runner._last_error(out / "logs" / f"{cell.id}.node0.log")
    reason = f" ({job.reason})" if job.reason else ""
    error = f"slurm job {job.job_id} ended {job.state}{reason}" + (f": {logged}" if logged else "")
    document = runner.own_document(spec.command, cell, status, error, _exit_status(job))
    document["error_class"] = kind or document["error_class"]
    document["slurm"] = _job_fields(job)
    return document


def _exit_status(job: scheduler.JobState) -> int | None:
    """The batch script's exit status from Slurm's ``STATUS:SIGNAL``."""
    status = (job.exit_code or "").split(":")[0]
    return int(status) if status.isdigit() else None


def _job_fields(job: scheduler.JobState) -> dict:
    return {
        "job_id": job.job_id,
        "state": job.state,
        "reason": job.reason,
        "exit_code": job.exit_code,
        "restarts": job.restarts,
    }


def collect(spec, cell, job: scheduler.JobState, out: Path) -> dict:
    """An ended job's result: the one its script moved into place, else one made here."""
    path = result_path(out, cell)
    document = runner.complete(path)
    if document is None:
        document = ended_document(spec, cell, job, out)
        write_atomic(path, json.dumps(document, indent=2) + "\n")
    return document


def _found_by_name(spec, plans, out: Path) -> dict[str, str]:
    """Jobs of this matrix the controller knows but the record lacks (a submitter killed
    between sbatch and the record): by job name and working directory."""
    workdir = str(out.resolve())
    names = {job_name(spec, p.cell): p.cell.id for p in plans}
    return {
        names[job.name]: job.job_id
        for job in scheduler.known_jobs()
        if job.name in names and job.workdir == workdir
    }


class Watch:
    """Submit what needs a job, then poll Slurm until every job has ended."""

    def __init__(self, spec, plans, out: Path, pm, *, resubmit_failed=False, poll_s=POLL_S):
        self.spec, self.plans, self.out, self.pm = spec, plans, out, pm
        self.resubmit_failed, self.poll_s = resubmit_failed, poll_s
        self.defaults = settings.from_table(spec.slurm)
        self.record = read_record(out)
        self.record.setdefault("started", provenance.utc_now())
        self.record.setdefault("cells", {})
        self.documents: dict[str, dict] = {}
        self.states: dict[str, scheduler.JobState] = {}

    def entry(self, cell) -> dict:
        return self.record["cells"].setdefault(cell.id, {"jobs": []})

    def _needs_job(self, plan) -> bool:
        entry = self.entry(plan.cell)
        document = runner.complete(result_path(self.out, plan.cell))
        if document is not None:
            retry = self.resubmit_failed and document["status"] != "ok"
            if not retry:
                self.documents[plan.cell.id] = document
                return False
            result_path(self.out, plan.cell).unlink()
            entry["job_id"] = None
        return not entry.get("job_id")

    def submit_missing(self) -> None:
        """sbatch every cell without a live or finished job; a refusal is that cell's result."""
        for cell_id, job_id in _found_by_name(self.spec, self.plans, self.out).items():
            entry = self.record["cells"].setdefault(cell_id, {"jobs": []})
            if not entry.get("job_id") and job_id not in entry["jobs"]:
                entry.update(job_id=job_id, jobs=[*entry["jobs"], job_id])
        for plan in self.plans:
            if plan.skip or not self._needs_job(plan):
                continue
            try:
                job_id = submit(self.spec, plan, self.out, self.defaults)
            except scheduler.SlurmError as error:
                self._refused(plan.cell, str(error))
                continue
            entry = self.entry(plan.cell)
            entry.update(
                job_id=job_id, jobs=[*entry["jobs"], job_id], submitted=provenance.utc_now()
            )
            write_record(self.out, self.record)
            stderr.print(f"{plan.cell.id}: submitted as job {job_id}", markup=False)
        write_record(self.out, self.record)

    def _refused(self, cell, message: str) -> None:
        from mtb.documents import result_document

        document = result_document(
            "matrix_cell",
            status="failed",
            error=message,
            error_class="submit",
            command=self.spec.command,
            cell=cell.id,
            options=cell.options,
        )
        write_atomic(result_path(self.out, cell), json.dumps(document, indent=2) + "\n")
        self.documents[cell.id] = document
        stderr.print(message, markup=False, soft_wrap=True)

    def pending(self) -> dict[str, str]:
        """cell id -> job id of the jobs still to watch."""
        return {
            p.cell.id: self.entry(p.cell)["job_id"]
            for p in self.plans
            if not p.skip and p.cell.id not in self.documents and self.entry(p.cell).get("job_id")
        }

    def poll(self) -> bool:
        """Read every watched job's state once, collect the ended ones; True when none is left."""
        waiting = self.pending()
        found = scheduler.states(list(waiting.values()))
        by_id = {p.cell.id: p.cell for p in self.plans}
        changed = False
        for cell_id, job_id in waiting.items():
            job = found[job_id]
            if self.states.get(cell_id) != job:
                self.states[cell_id] = job
                self.entry(by_id[cell_id]).update(state=job.state, reason=job.reason)
                changed = True
                reason = f" ({job.reason})" if job.reason else ""
                stderr.print(f"{cell_id}: job {job_id} {job.state}{reason}", markup=False)
            if job.terminal:
                self.documents[cell_id] = collect(self.spec, by_id[cell_id], job, self.out)
        if changed:
            write_record(self.out, self.record)
        return not self.pending()

    def wait(self) -> None:
        """Poll until every job has ended, a live table of the states on a terminal."""
        from rich.live import Live

        from mtb.matrix.display import live_jobs_table

        with Live(console=stderr, transient=True, auto_refresh=False) as live:
            while not self.poll():
                live.update(live_jobs_table(self.states, self.documents), refresh=True)
                time.sleep(self.poll_s)

    def rows(self) -> list[dict]:
        rows = []
        for plan in self.plans:
            if plan.skip:
                rows.append(records.skipped_row(plan))
                continue
            document = self.documents.get(plan.cell.id)
            if document is None:
                continue
            entry = self.entry(plan.cell)
            path = str(result_path(self.out, plan.cell).relative_to(self.out))
            extra = {"job_id": entry.get("job_id"), "slurm_state": entry.get("state")}
            rows.append(records.row(plan, document, path, **extra))
        return rows

    def finish(self) -> tuple[dict, Path | None]:
        """matrix.json and the report, as a local matrix writes them."""
        from mtb.documents import document_provenance, plugin_list

        plugins = plugin_list(self.pm)
        prov = document_provenance(plugins, started=self.record["started"], finished=True)
        rows = self.rows()
        matrix = records.document(self.spec, rows, len(self.plans), prov, plugins)
        matrix["executor"] = "slurm"
        write_atomic(self.out / "matrix.json", json.dumps(matrix, indent=2) + "\n")
        documents = [self.documents[r["cell"]] for r in rows if r["cell"] in self.documents]
        with contextlib.suppress(OSError):
            (self.out / "running").rmdir()
        return matrix, _write_report(self.pm, self.out, matrix, documents)


def run(spec, plans, out: Path, pm, *, resubmit_failed=False, detach=False, poll_s=POLL_S):
    """Submit, and unless ``detach`` watch until every job has ended: (matrix, report).

    A signal to the submitter (Ctrl-C, SIGTERM) stops the watching only: the jobs are the
    cluster's and go on; the line says how to re-attach or cancel them.
    """
    from mtb.launch import interruptible

    scheduler.check_reachable()
    watch = Watch(spec, plans, out, pm, resubmit_failed=resubmit_failed, poll_s=poll_s)
    try:
        with interruptible():
            watch.submit_missing()
            if detach:
                return None, None
            watch.wait()
    except Interrupted as stopped:
        raise LeftRunning(stopped.signum, out) from None
    return watch.finish()


class LeftRunning(Interrupted):
    """The submitter was stopped; the submitted jobs were not (exit 128 + N)."""

    def __init__(self, signum: int, out: Path):
        super().__init__(signum)
        self.args = (
            f"{self.args[0]}; the submitted jobs go on: re-attach with "
            f"mtb matrix run ... --resume --output-dir {out}, stop them with "
            f"mtb matrix cancel {out}",
        )


def _recorded(out: Path) -> dict[str, str]:
    """cell id -> its latest job id, from the record; one line when there is none."""
    cells = read_record(out)["cells"]
    jobs = {cell: entry["job_id"] for cell, entry in cells.items() if entry.get("job_id")}
    if not jobs:
        raise UsageError(f"OUTPUT_DIR: {out} holds no Slurm jobs (no {RECORD})")
    return jobs


def job_states(out: Path) -> dict[str, scheduler.JobState]:
    """cell id -> what Slurm says of its job now."""
    jobs = _recorded(out)
    scheduler.check_reachable()
    found = scheduler.states(list(jobs.values()))
    return {cell: found[job] for cell, job in jobs.items()}


def cancel(out: Path, timeout_s: float = 120.0) -> list[str]:
    """scancel the jobs not yet ended; wait until Slurm reports each ended. Their ids."""
    cancelled = [job.job_id for job in job_states(out).values() if not job.terminal]
    scheduler.cancel(cancelled)
    live, deadline = cancelled, time.monotonic() + timeout_s
    while live and time.monotonic() < deadline:
        live = [j.job_id for j in scheduler.states(live).values() if not j.terminal]
        time.sleep(0.5)
    if live:
        raise RunFailed(f"cancel: jobs {' '.join(live)} still not ended after {timeout_s:g} s")
    return cancelled
