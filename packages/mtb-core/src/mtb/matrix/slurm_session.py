"""A matrix on Slurm: each cell one job, submitted, watched until it ends, its result collected.

The jobs are recorded (:mod:`mtb.matrix.slurm_jobs`), so the matrix survives
its submitter: ``--resume`` (from any machine that shares the directory)
re-attaches to pending and running jobs, collects the ended ones, and submits
only the cells that have neither a job nor a result.
"""

import contextlib
import json
import time
from pathlib import Path

from mtb import provenance
from mtb.console import stderr
from mtb.errors import Interrupted, UsageError
from mtb.matrix import records, runner, slurm_jobs
from mtb.matrix.session import result_path, write_report
from mtb.reporting import write_atomic
from mtb.slurm import scheduler

POLL_S = 5.0


class Watch:
    """Submit what needs a job, then poll Slurm until every job has ended."""

    def __init__(self, spec, plans, out: Path, pm, *, resubmit_failed=False, poll_s=POLL_S):
        self.spec, self.out, self.pm = spec, out, pm
        self.plans = [p for p in plans if not p.skip]
        self.all_plans = plans
        self.resubmit_failed, self.poll_s = resubmit_failed, poll_s
        self.settings = slurm_jobs.cell_settings(spec, self.plans)
        self.record = slurm_jobs.read_record(out)
        self.record.setdefault("started", provenance.utc_now())
        self.documents: dict[str, dict] = {}
        self.states: dict[str, scheduler.JobState] = {}
        self._known: list[scheduler.JobState] | None = None

    def entry(self, cell) -> dict:
        return self.record["cells"].setdefault(cell.id, {"job_id": None, "jobs": []})

    def known(self) -> list[scheduler.JobState]:
        """This user's jobs as the controller knows them, read once (for adoption)."""
        if self._known is None:
            self._known = scheduler.mine()
        return self._known

    def _needs_job(self, plan) -> bool:
        """No result to keep (or one to redo under --resubmit-failed) and no job recorded
        or found running it."""
        entry, path = self.entry(plan.cell), result_path(self.out, plan.cell)
        document = runner.complete(path)
        if document is not None and not (self.resubmit_failed and document["status"] != "ok"):
            self.documents[plan.cell.id] = document
            return False
        if document is not None:
            path.unlink()
            entry["job_id"] = None
        if not entry.get("job_id"):
            adopted = slurm_jobs.adoptable(self.spec, plan.cell, self.out, self.known())
            if adopted:
                entry.update(job_id=adopted, jobs=[*entry["jobs"], adopted])
        return not entry.get("job_id")

    def submit_missing(self) -> None:
        """sbatch every cell without a result or a job; a refusal is that cell's result."""
        for plan in self.plans:
            if not self._needs_job(plan):
                continue
            job = slurm_jobs.job_for(self.spec, plan, self.out, self.settings[plan.cell.id])
            try:
                job_id = slurm_jobs.submit(job, self.out, plan.cell.id)
            except scheduler.SlurmError as error:
                self._refused(plan.cell, str(error))
                continue
            entry = self.entry(plan.cell)
            entry.update(job_id=job_id, jobs=[*entry["jobs"], job_id])
            entry["submitted"] = provenance.utc_now()
            slurm_jobs.write_record(self.out, self.record)
            stderr.print(f"{plan.cell.id}: submitted as job {job_id}", markup=False)
        slurm_jobs.write_record(self.out, self.record)

    def _refused(self, cell, message: str) -> None:
        document = runner.own_document(self.spec.command, cell, "failed", message, None)
        document["error_class"] = "submit"
        write_atomic(result_path(self.out, cell), json.dumps(document, indent=2) + "\n")
        self.documents[cell.id] = document
        stderr.print(message, markup=False, soft_wrap=True)

    def pending(self) -> dict[str, str]:
        """cell id -> job id of the jobs still to watch."""
        return {
            p.cell.id: self.entry(p.cell)["job_id"]
            for p in self.plans
            if p.cell.id not in self.documents and self.entry(p.cell).get("job_id")
        }

    def poll(self) -> bool:
        """Read every watched job's state once, collect the ended ones; True when none is left.

        A controller that does not answer (a restart, a fail-over) skips this poll."""
        waiting = self.pending()
        try:
            found = scheduler.states(list(waiting.values()))
        except scheduler.SlurmError as error:
            stderr.print(f"{error}; trying again in {self.poll_s:g} s", markup=False)
            return False
        cells = {p.cell.id: p.cell for p in self.plans}
        for cell_id, job_id in waiting.items():
            self._saw(cells[cell_id], found[job_id])
        slurm_jobs.write_record(self.out, self.record)
        return not self.pending()

    def _saw(self, cell, job: scheduler.JobState) -> None:
        if self.states.get(cell.id) != job:
            self.states[cell.id] = job
            self.entry(cell).update(state=job.state, reason=job.reason)
            reason = f" ({job.reason})" if job.reason else ""
            stderr.print(f"{cell.id}: job {job.job_id} {job.state}{reason}", markup=False)
        if job.terminal:
            self.documents[cell.id] = slurm_jobs.collect(self.spec, cell, job, self.out)

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
        for plan in self.all_plans:
            if plan.skip:
                rows.append(records.skipped_row(plan))
            elif (document := self.documents.get(plan.cell.id)) is not None:
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
        matrix = records.document(self.spec, rows, len(self.all_plans), prov, plugins)
        matrix["executor"] = "slurm"
        write_atomic(self.out / "matrix.json", json.dumps(matrix, indent=2) + "\n")
        documents = [self.documents[r["cell"]] for r in rows if r["cell"] in self.documents]
        with contextlib.suppress(OSError):
            (self.out / "running").rmdir()
        return matrix, write_report(self.pm, self.out, matrix, documents)


def run(spec, plans, out: Path, pm, *, resubmit_failed=False, detach=False, poll_s=POLL_S):
    """Submit, and unless ``detach`` watch until every job has ended: (matrix, report).

    A signal to the submitter (Ctrl-C, SIGTERM) stops the watching only: the jobs are the
    cluster's and go on; the line says how to re-attach or cancel them.
    """
    from mtb.launch import interruptible

    scheduler.check_reachable()
    watch = Watch(spec, plans, out, pm, resubmit_failed=resubmit_failed, poll_s=poll_s)
    try:
        with interruptible(), _only_submitter(out):
            watch.submit_missing()
            if detach:
                return None, None
            watch.wait()
    except Interrupted as stopped:
        raise LeftRunning(stopped.signum, out, bool(watch.pending())) from None
    return watch.finish()


@contextlib.contextmanager
def _only_submitter(out: Path):
    """One submitter per matrix at a time (a POSIX lock, which NFS carries between hosts):
    two would both submit the cells neither had recorded yet."""
    import fcntl

    path = out / "slurm" / "submitter.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UsageError(
                f"--output-dir: another mtb matrix run is submitting or watching {out} "
                "(stop it first, or watch with mtb matrix status)"
            ) from None
        yield


class LeftRunning(Interrupted):
    """The submitter was stopped; the jobs it submitted were not (exit 128 + N)."""

    def __init__(self, signum: int, out: Path, submitted: bool):
        super().__init__(signum)
        if submitted:
            self.args = (
                f"{self.args[0]}; the submitted jobs go on: re-attach with "
                f"mtb matrix run ... --resume --output-dir {out}, stop them with "
                f"mtb matrix cancel {out}",
            )
