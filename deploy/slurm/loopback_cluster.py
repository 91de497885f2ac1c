"""A real two-node Slurm cluster on this one machine, for trying and testing mtb's executor.

    python deploy/slurm/loopback_cluster.py start DIR   # munged, slurmctld, slurmd n1 and n2
    python deploy/slurm/loopback_cluster.py stop DIR    # stops them by their PIDs

Everything (configuration, state, spool, logs, PID files, munge socket) lives
under DIR; the daemons run as the current user, which must be root (slurmd
starts jobs as their owner). ``start`` prints the environment to export
(``SLURM_CONF``) and returns once both nodes are idle. Needs Debian's
``slurm-wlm`` and ``munge`` (``apt-get install slurm-wlm munge``).

Both nodes are this host at 127.0.0.1, each slurmd on its own port, with
``CPUS`` CPUs each (more than the host has is allowed: jobs share its cores).
Jobs that finished stay known to the controller for ``MinJobAge`` seconds;
there is no accounting database, so ``sacct`` has nothing.
"""

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

NODES = ("n1", "n2")
CPUS = 2
READY_TIMEOUT_S = 60.0

CONFIG = """\
ClusterName=loopback
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={dir}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=10
SchedulerParameters=sched_interval=2
{nodes}
PartitionName=debug Nodes={node_list} Default=YES MaxTime=INFINITE State=UP
"""
NODE = "NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={cpus}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def missing_programs() -> list[str]:
    return [p for p in ("munged", "slurmctld", "slurmd", "sbatch") if shutil.which(p) is None]


def write_config(folder: Path) -> Path:
    """slurm.conf for the two nodes, with free ports; its absolute path."""
    host = socket.gethostname().split(".")[0]
    ports = [free_port() for _ in range(len(NODES) + 2)]
    nodes = "\n".join(
        NODE.format(name=name, host=host, port=port, cpus=CPUS)
        for name, port in zip(NODES, ports[2:], strict=True)
    )
    text = CONFIG.format(
        host=host,
        ctld_port=ports[0],
        slurmd_port=ports[1],
        user=os.environ.get("USER", "root"),
        dir=folder,
        nodes=nodes,
        node_list=",".join(NODES),
    )
    path = folder / "slurm.conf"
    path.write_text(text)
    return path


def _daemons(folder: Path, conf: Path) -> list[list[str]]:
    munge = folder / "munge"
    return [
        [
            "munged",
            "--force",
            f"--socket={munge / 'munge.socket'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={folder / 'log' / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        ],
        ["slurmctld", "-f", str(conf), "-i"],
        *(["slurmd", "-f", str(conf), "-N", name] for name in NODES),
    ]


def environment(folder: Path) -> dict[str, str]:
    """What a client needs to reach this cluster."""
    return {"SLURM_CONF": str(folder / "slurm.conf")}


def pid_files(folder: Path) -> list[Path]:
    return [
        folder / "munge" / "munged.pid",
        folder / "slurmctld.pid",
        *(folder / f"slurmd-{name}.pid" for name in NODES),
    ]


def start(folder: Path) -> dict[str, str]:
    """Start the cluster in ``folder`` (made if missing); wait until both nodes are idle."""
    folder = folder.resolve()
    for sub in ("state", "log", "munge", *(f"spool/{n}" for n in NODES)):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "munge").chmod(0o700)
    conf = write_config(folder)
    env = {**os.environ, **environment(folder)}
    for command in _daemons(folder, conf):
        subprocess.run(command, check=True, env=env, capture_output=True, timeout=30)
        if command[0] == "munged":
            _wait_for(lambda: (folder / "munge" / "munge.socket").exists(), "munged")
    _wait_for(lambda: _idle_nodes(env) == len(NODES), "both nodes idle")
    return environment(folder)


def _idle_nodes(env: dict) -> int:
    shown = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %t"], env=env, capture_output=True, text=True, timeout=10
    )
    return sum(line.split()[1] == "idle" for line in shown.stdout.splitlines() if line.strip())


def _wait_for(ready, what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"loopback cluster: {what} not reached in {READY_TIMEOUT_S:g} s")
        time.sleep(0.5)


def stop(folder: Path) -> None:
    """SIGTERM each daemon by the PID it wrote, then SIGKILL what is left after 10 s."""
    pids = []
    for path in pid_files(folder.resolve()):
        try:
            pids.append(int(path.read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            continue
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in pids:
        _signal(pid, signal.SIGKILL)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    if args.action == "stop":
        stop(args.folder)
        return
    missing = missing_programs()
    if missing:
        sys.exit(f"loopback cluster: not installed: {', '.join(missing)} (slurm-wlm, munge)")
    for key, value in start(args.folder).items():
        print(f"export {key}={value}")


if __name__ == "__main__":
    main()
