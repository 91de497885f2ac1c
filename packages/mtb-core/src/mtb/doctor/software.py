"""Python, torch and its build: the versions a bug report needs first."""

import platform
import re

from mtb.doctor.check import FAIL, OK, WARN, Check

AREA = "software"


def _build_flags(config: str) -> dict:
    """``torch.__config__.show()``'s "Build settings" as a dict (USE_CUDA=ON, ...)."""
    match = re.search(r"Build settings: (.*)", config)
    flags = {}
    for item in match.group(1).split(", ") if match else []:
        key, _, value = item.partition("=")
        flags[key.strip()] = value.strip()
    return flags


def versions() -> Check:
    import torch

    flags = _build_flags(torch.__config__.show())
    wanted = ("USE_CUDA", "USE_CUDNN", "USE_NCCL", "USE_GLOO", "USE_MPI", "USE_MKLDNN")
    details = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "git_version": torch.version.git_version,
        "build_flags": {k: flags[k] for k in wanted if k in flags},
        "cxx11_abi": torch.compiled_with_cxx11_abi(),
    }
    cuda = f", CUDA {torch.version.cuda}" if torch.version.cuda else ", CPU build"
    message = f"python {details['python']}, torch {torch.__version__}{cuda}"
    return Check(name="versions", area=AREA, status=OK, message=message, details=details)


def libraries() -> Check:
    """cuDNN and NCCL as torch loads them (only meaningful with a CUDA device)."""
    import torch

    cuda = torch.cuda.is_available()
    nccl = None
    if cuda and torch.distributed.is_nccl_available():
        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    details = {"cudnn": torch.backends.cudnn.version() if cuda else None, "nccl": nccl}
    if not cuda:
        message = "no CUDA device: cuDNN and NCCL are not loaded"
        return Check(name="libraries", area=AREA, status=OK, message=message, details=details)
    message = f"cuDNN {details['cudnn']}, NCCL {nccl}"
    status = OK if nccl else WARN
    if not nccl:
        message += ": this torch has no NCCL; GPU runs fall back to gloo (slow)"
    return Check(name="libraries", area=AREA, status=status, message=message, details=details)


def backends() -> Check:
    import torch.distributed as dist

    found = {
        "gloo": dist.is_gloo_available(),
        "nccl": dist.is_nccl_available(),
        "mpi": dist.is_mpi_available(),
    }
    if not dist.is_available():
        message = "torch.distributed is not built into this torch: no multi-process run can start"
        return Check(name="distributed", area=AREA, status=FAIL, message=message, details=found)
    names = ", ".join(name for name, there in found.items() if there) or "none"
    status = OK if found["gloo"] else FAIL
    message = f"process-group backends: {names}"
    if not found["gloo"]:
        message += "; gloo is missing, so CPU runs cannot start"
    return Check(name="distributed", area=AREA, status=status, message=message, details=found)


def checks() -> list[Check]:
    return [versions(), libraries(), backends()]
