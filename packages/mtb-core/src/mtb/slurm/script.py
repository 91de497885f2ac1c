"""The batch script of one mtb command on Slurm: what the executor submits, what
``mtb slurm script`` prints.

One task per node (``srun --ntasks-per-node=1``) starts that node's mtb
agent, and the agents meet at a c10d rendezvous on the first node's
``NodeAddr``, on a port free there. Each node's output goes to its own
file. The result is written under ``running/`` and moved into place only
when the command is over, so a job stopped midway never looks finished. With
checkpoints, the job asks for ``--signal USR1`` before its time limit: the
ranks save and exit with PREEMPTION_EXIT, and the job requeues itself; a
requeued job resumes from the newest checkpoint (``--resume latest``).
"""

import shlex

import attrs

from mtb.errors import UsageError
from mtb.preemption import PREEMPTION_EXIT
from mtb.slurm.settings import SlurmSettings

SIGNAL = "USR1"
#: what a result path must not hold: it is spliced into the script in double quotes
UNQUOTABLE = '"$`\\\n'


def _plain_path(instance, attribute, value):
    if not value or any(c in value for c in UNQUOTABLE) or value.endswith("/"):
        raise UsageError(f"--output: {value!r} must be a file path without {UNQUOTABLE!r}")


def _shell_path(path: str) -> str:
    """``path`` double-quoted for the job's shell, %j standing for the job id."""
    return '"' + path.replace("%j", "${SLURM_JOB_ID}") + '"'


def running_path(result: str) -> str:
    """Where the command writes the result until it is over."""
    return "running/" + result.rsplit("/", 1)[-1]


@attrs.frozen(kw_only=True)
class Job:
    """One mtb command as a Slurm job."""

    name: str
    command: tuple[str, ...]
    argv: tuple[str, ...]
    nodes: int
    nproc_per_node: int
    device: str
    timeout_s: float
    settings: SlurmSettings
    #: where the result lands, relative to ``chdir`` (or to the submit directory); %j is
    #: the job id
    result: str = attrs.field(validator=_plain_path)
    #: LOG_DIR/<stem>.slurm.out for the batch script, LOG_DIR/<stem>.node<N>.log per node
    #: (Slurm opens the first before the script starts: the folder must exist)
    log_stem: str
    log_dir: str = "logs"
    chdir: str | None = None
    checkpoints: bool = False


def _directives(job: Job) -> list[str]:
    s = job.settings
    pairs = [
        ("job-name", job.name),
        ("nodes", job.nodes),
        ("ntasks-per-node", 1),
        ("cpus-per-task", s.cpus_per_task),
        ("gpus-per-node", job.settings.gpus(job.nproc_per_node, job.device) or None),
        ("time", s.time_limit(job.timeout_s, job.checkpoints)),
        ("partition", s.partition),
        ("account", s.account),
        ("qos", s.qos),
        ("constraint", s.constraint),
        ("chdir", job.chdir),
        ("output", f"{job.log_dir}/{job.log_stem}.slurm.out"),
        ("open-mode", "append"),
    ]
    lines = [f"#SBATCH --{key}={shlex.quote(str(v))}" for key, v in pairs if v is not None]
    if job.checkpoints:
        lines += ["#SBATCH --requeue", f"#SBATCH --signal={SIGNAL}@{s.signal_s}"]
    else:
        lines.append("#SBATCH --no-requeue")
    return lines + [f"#SBATCH {_directive(arg)}" for arg in shlex.split(s.sbatch_args)]


def _directive(arg: str) -> str:
    """``--key=value`` with the value quoted: sbatch splits a directive line into words."""
    key, sep, value = arg.partition("=")
    return f"{key}={shlex.quote(value)}" if sep else shlex.quote(arg)


def _mtb_line(job: Job) -> str:
    """The command each node's task execs (single-quoted: expanded by the task's shell)."""
    words = [shlex.quote(job.settings.python), "-m", "mtb", *job.command]
    words += [shlex.quote(a) for a in job.argv]
    if job.nodes > 1:
        words += [
            '--node-rank "$SLURM_NODEID"',
            '--rdzv-endpoint "$MTB_RDZV_ENDPOINT"',
            '--rdzv-id "$SLURM_JOB_ID.$SLURM_RESTART_COUNT"',
        ]
    if job.checkpoints:
        words += ["--save-on-signal", "--resume", "latest"]
    words += ["--output", _shell_path(running_path(job.result))]
    return "exec " + " ".join(words)


#: the first node's name, and the address Slurm reaches it at (sed reads every line:
#: head would exit early and fail the pipeline by SIGPIPE)
HEAD_NODE = 'head_node="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)"'
HEAD_ADDR = (
    'head_addr="$(scontrol show node "$head_node" | sed -n "s/.*NodeAddr=\\([^ ]*\\).*/\\1/p")"'
)
FREE_PORT = 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'


def _rendezvous(job: Job) -> list[str]:
    """Shell lines setting MTB_RDZV_ENDPOINT: the first node's address and a port free
    there (none for one node, which needs no rendezvous address)."""
    if job.nodes == 1:
        return []
    port = f'port="$({shlex.quote(job.settings.python)} -c {shlex.quote(FREE_PORT)})"'
    endpoint = 'export MTB_RDZV_ENDPOINT="${head_addr:-$head_node}:$port"'
    return [HEAD_NODE, HEAD_ADDR, port, endpoint]


def _setup(job: Job) -> list[str]:
    """The user's set-up lines, before ``set -u`` (module and conda scripts break under it);
    the job stops when they fail rather than run mtb in the wrong environment."""
    if not job.settings.setup:
        return []
    return ["{", job.settings.setup, '} || { echo "mtb: the setup lines failed" >&2; exit 1; }']


def _kill_on_bad_exit(job: Job) -> str:
    """One failed node stops the others; not with checkpoints, where every node exits with
    PREEMPTION_EXIT after saving and the first to leave must not turn the others' exit into
    a kill (the job would then not requeue)."""
    return "" if job.checkpoints else " --kill-on-bad-exit=1"


def render(job: Job) -> str:
    running, result = _shell_path(running_path(job.result)), _shell_path(job.result)
    body = [
        "#!/bin/bash",
        f"# mtb {' '.join(job.command)} on {job.nodes} node(s) x {job.nproc_per_node} rank(s):"
        " generated by mtb (mtb slurm script prints this form)",
        *_directives(job),
        *_setup(job),
        "set -uo pipefail",
        # a requeued job runs again: what an earlier attempt left in running/ is stale
        f'mkdir -p running "$(dirname {result})" && rm -f {running}',
        *_rendezvous(job),
        f"srun --ntasks-per-node=1{_kill_on_bad_exit(job)} --open-mode=append "
        f"--output={shlex.quote(f'{job.log_dir}/{job.log_stem}.node%n.log')} \\",
        f"    bash -c {shlex.quote(_mtb_line(job))}",
        "status=$?",
    ]
    if job.checkpoints:
        body += [
            f"if [ $status -eq {PREEMPTION_EXIT} ]; then",
            '    echo "mtb: saved on the warning signal; requeueing job $SLURM_JOB_ID"',
            '    scontrol requeue "$SLURM_JOB_ID" || exit $status',
            "    exit 0",
            "fi",
        ]
    body += [
        f"if [ -s {running} ]; then mv -f {running} {result}; fi",
        "exit $status",
    ]
    return "\n".join(body) + "\n"
