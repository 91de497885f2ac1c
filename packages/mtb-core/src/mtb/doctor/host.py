"""CPU, NUMA, memory, /dev/shm and ulimits: what every rank on this node shares."""

import os
import resource
import shutil
from pathlib import Path

from mtb.doctor.check import OK, WARN, Check
from mtb.provenance import cpu_info

AREA = "host"
GiB = 2**30
# NCCL and gloo pass tensors between local ranks through /dev/shm; containers
# default to 64 MiB, which fails or silently slows multi-rank runs.
SHM_MINIMUM = 1 * GiB
OPEN_FILES_MINIMUM = 65536


def numa_nodes(root: Path = Path("/sys/devices/system/node")) -> dict:
    """NUMA node -> its CPU list, from sysfs (empty where it is not visible)."""
    nodes = {}
    for node in sorted(root.glob("node[0-9]*")):
        cpulist = node / "cpulist"
        nodes[node.name] = cpulist.read_text().strip() if cpulist.exists() else None
    return nodes


def cpu() -> Check:
    import psutil

    details = {
        **cpu_info(),
        "physical_cores": psutil.cpu_count(logical=False),
        "affinity": len(os.sched_getaffinity(0)),
        "numa_nodes": numa_nodes(),
    }
    numa = len(details["numa_nodes"]) or "unknown"
    message = (
        f"{details['model']}: {details['logical_cores']} logical, "
        f"{details['physical_cores']} physical cores, {details['affinity']} usable, "
        f"NUMA nodes {numa}"
    )
    return Check(name="cpu", area=AREA, status=OK, message=message, details=details)


def memory() -> Check:
    import psutil

    mem = psutil.virtual_memory()
    details = {"total_bytes": mem.total, "available_bytes": mem.available}
    message = f"{mem.total / GiB:.1f} GiB, {mem.available / GiB:.1f} GiB available"
    return Check(name="memory", area=AREA, status=OK, message=message, details=details)


def shared_memory(path: str = "/dev/shm") -> Check:
    if not os.path.isdir(path):
        message = f"{path} does not exist: local ranks cannot share tensors through it"
        return Check(name="shm", area=AREA, status=WARN, message=message)
    total = shutil.disk_usage(path).total
    details = {"path": path, "total_bytes": total}
    message = f"{path}: {total / GiB:.2f} GiB"
    status = OK
    if total < SHM_MINIMUM:
        status = WARN
        message += " (below 1 GiB; in a container raise it with --shm-size or --ipc=host)"
    return Check(name="shm", area=AREA, status=status, message=message, details=details)


def _limit(value: int) -> int | None:
    return None if value == resource.RLIM_INFINITY else value


def ulimits() -> Check:
    files_soft, files_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lock_soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    details = {
        "open_files_soft": _limit(files_soft),
        "open_files_hard": _limit(files_hard),
        "locked_memory_bytes": _limit(lock_soft),
    }
    problems = []
    if _limit(files_soft) is not None and files_soft < OPEN_FILES_MINIMUM:
        problems.append(f"open files {files_soft} (raise with ulimit -n {OPEN_FILES_MINIMUM})")
    if _limit(lock_soft) is not None and Path("/sys/class/infiniband").is_dir():
        problems.append("locked memory is limited; RDMA needs ulimit -l unlimited")
    locked = "unlimited" if details["locked_memory_bytes"] is None else f"{lock_soft} B"
    message = f"open files {files_soft}/{files_hard}, locked memory {locked}"
    if problems:
        message = "; ".join(problems)
    status = WARN if problems else OK
    return Check(name="ulimits", area=AREA, status=status, message=message, details=details)


def checks() -> list[Check]:
    return [cpu(), memory(), shared_memory(), ulimits()]
