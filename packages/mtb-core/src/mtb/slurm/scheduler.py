"""Slurm's own commands, each failure one line: submit, read job states, cancel.

No scheduler of mtb's own: ``sbatch --parsable`` submits, ``squeue`` reads
the states of the jobs asked for (one call for all of them; the controller
knows ended jobs for ``MinJobAge``, five minutes by default), ``scontrol show
job`` an ended job's exit code, ``sacct`` the older ones where accounting is
on, ``scancel`` stops them. State names are Slurm's (``squeue --help`` lists them).
"""

import re
import shutil
import subprocess

import attrs

from mtb.errors import RunFailed, UsageError

COMMAND_TIMEOUT_S = 60.0
#: states a job leaves only by being requeued (then it is PENDING again)
TERMINAL = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "TIMEOUT",
        "CANCELLED",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "BOOT_FAIL",
        "DEADLINE",
        "PREEMPTED",
    }
)
#: a job no command knows any more (purged, and no accounting)
UNKNOWN = "UNKNOWN"
FIELDS = re.compile(r"\b(JobId|JobName|JobState|Reason|ExitCode|Restarts|WorkDir)=(\S*)")
#: squeue's columns: id, state, reason, name, working directory (last: it may hold "|")
SQUEUE_FORMAT = "%i|%T|%r|%j|%Z"


@attrs.frozen
class JobState:
    """What Slurm says of one job: its state, why (Reason), exit code, times requeued."""

    job_id: str
    state: str
    reason: str | None = None
    exit_code: str | None = None
    restarts: int = 0
    name: str | None = None
    workdir: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL or self.state == UNKNOWN


class SlurmError(RunFailed):
    """A Slurm command refused or failed: its own message, on one line."""


def _run(args: list[str], what: str) -> str:
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise UsageError(f"executor: {args[0]} is not on PATH (no Slurm client here)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{what}: {args[0]} did not answer in {COMMAND_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        raise SlurmError(f"{what}: {_message(args[0], done.stderr or done.stdout)}")
    return done.stdout


def _message(program: str, text: str) -> str:
    """Slurm's lines as one, without the ``sbatch: error:`` prefix of each."""
    lines = []
    for line in text.splitlines():
        for prefix in (f"{program}: error: ", f"{program}: "):
            line = line.strip().removeprefix(prefix)
        if line:
            lines.append(line)
    return "; ".join(lines) or "no message"


def check_reachable() -> None:
    """One line, before anything is submitted, when there is no Slurm to submit to."""
    for program in ("sbatch", "squeue", "scontrol", "scancel"):
        if shutil.which(program) is None:
            raise UsageError(f"executor: slurm needs {program} on PATH; it is not installed here")
    try:
        _run(["scontrol", "ping"], "executor: slurm controller")
    except SlurmError as error:
        raise UsageError(f"{error} (is slurmctld running and SLURM_CONF right?)") from None


def submit(script: str, what: str) -> str:
    """``sbatch --parsable`` the script file; the job id (Slurm's message on refusal)."""
    out = _run(["sbatch", "--parsable", script], what)
    return out.strip().split(";")[0]


def _parse(line: str) -> JobState | None:
    """One ``scontrol show job --oneliner`` line (for the exit code and restarts)."""
    fields = dict(FIELDS.findall(line))
    if "JobId" not in fields or "JobState" not in fields:
        return None
    reason = fields.get("Reason")
    return JobState(
        job_id=fields["JobId"],
        state=fields["JobState"],
        reason=None if reason in (None, "None") else reason,
        exit_code=fields.get("ExitCode"),
        restarts=int(fields.get("Restarts") or 0),
        name=fields.get("JobName"),
        workdir=fields.get("WorkDir"),
    )


def _queued(args: list[str]) -> list[JobState]:
    """``squeue --states=all`` rows (id, state, reason, name, working directory); none when
    Slurm no longer knows the ids asked for."""
    try:
        out = _run(["squeue", "-h", "--states=all", "-o", SQUEUE_FORMAT, *args], "squeue")
    except SlurmError as error:
        if "Invalid job id" in str(error):
            return []
        raise
    rows = []
    for line in out.splitlines():
        parts = line.split("|", 4)
        if len(parts) == 5:
            job_id, state, reason, name, workdir = parts
            why = None if reason == "None" else reason
            rows.append(JobState(job_id, state, why, name=name, workdir=workdir))
    return rows


def detail(job_id: str) -> JobState | None:
    """``scontrol show job``: one job with its exit code and restarts (None when unknown)."""
    try:
        out = _run(["scontrol", "show", "job", "--oneliner", job_id], "scontrol show job")
    except SlurmError:
        return None
    return next((state for line in out.splitlines() if (state := _parse(line))), None)


def mine() -> list[JobState]:
    """The jobs of this user the controller knows (pending, running, recently ended)."""
    return _queued(["--me"])


def _accounted(job_ids: list[str]) -> dict[str, JobState]:
    """Older jobs from ``sacct``; nothing where accounting is off."""
    if not job_ids or shutil.which("sacct") is None:
        return {}
    try:
        out = _run(
            ["sacct", "-X", "-n", "-P", "-o", "JobIDRaw,State,ExitCode", "-j", ",".join(job_ids)],
            "sacct",
        )
    except SlurmError:  # "Slurm accounting storage is disabled"
        return {}
    found = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[0] in job_ids:
            state = parts[1].split()[0]  # "CANCELLED by 0"
            found[parts[0]] = JobState(parts[0], state, exit_code=parts[2])
    return found


def states(job_ids: list[str], detailed: bool = False) -> dict[str, JobState]:
    """Each job's state: from the controller, else accounting, else UNKNOWN. One ``squeue``
    for all the ids; ``scontrol`` adds the exit code and restarts of the ended jobs (of
    every job when ``detailed``, as a one-off status wants)."""
    if not job_ids:
        return {}
    found = {s.job_id: s for s in _queued(["--jobs", ",".join(job_ids)]) if s.job_id in job_ids}
    for job_id, state in list(found.items()):
        if state.terminal or detailed:
            found[job_id] = detail(job_id) or state
    found.update(_accounted([j for j in job_ids if j not in found]))
    return {j: found.get(j, JobState(j, UNKNOWN, "no longer known to Slurm")) for j in job_ids}


def cancel(job_ids: list[str]) -> None:
    if job_ids:
        _run(["scancel", *job_ids], "scancel")
