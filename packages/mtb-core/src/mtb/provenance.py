"""Provenance: enough about code, software, hardware and image to reproduce a result."""

import datetime as dt
import os
import platform
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

# Variables a container image sets to identify itself (see docker/).
IMAGE_VARIABLES = (
    "MTB_IMAGE_REVISION",
    "MTB_IMAGE_NAME",
    "MTB_IMAGE_DIGEST",
    "MTB_BASE_IMAGE",
    "MTB_BASE_DIGEST",
    "MTB_IMAGE_CREATED",
)
#: the repositories of the base images docker/Dockerfile pins: official PyTorch, NVIDIA NGC
OFFICIAL_BASES = ("docker.io/pytorch/pytorch", "nvcr.io/nvidia/pytorch")
COMMAND_LINE_VARIABLE = "MTB_COMMAND_LINE"
ALLOW_UNVERIFIED_VARIABLE = "ALLOW_UNVERIFIED_PROVENANCE"


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _git(args: list[str], cwd: Path) -> str | None:
    if shutil.which("git") is None:
        return None
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_info(start: Path | None = None) -> dict:
    """Revision and dirty flag of the checkout holding mtb (or the cwd), if any."""
    for where in (start or Path(__file__).resolve().parent, Path.cwd()):
        revision = _git(["rev-parse", "HEAD"], where)
        if revision:
            status = _git(["status", "--porcelain", "--untracked-files=no"], where)
            root = _git(["rev-parse", "--show-toplevel"], where)
            return {"revision": revision, "dirty": bool(status), "root": root}
    return {"revision": None, "dirty": None, "root": None}


def command_line() -> str:
    """The user's command: the launcher passes its own argv to workers."""
    argv = [Path(sys.argv[0]).name, *sys.argv[1:]]
    return os.environ.get(COMMAND_LINE_VARIABLE) or " ".join(shlex.quote(a) for a in argv)


def cpu_info() -> dict:
    model = platform.processor() or None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"model": model, "logical_cores": os.cpu_count(), "machine": platform.machine()}


def _nvidia_driver() -> str | None:
    from mtb.gpu_guard import nvidia_smi

    rows = nvidia_smi("--query-gpu=driver_version")
    return rows[0][0] if rows else None


def torch_info() -> dict:
    import torch

    cuda = torch.cuda.is_available()
    info: dict[str, object] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "nccl": None,
        "gpus": [],
        "gpu_driver": None,
    }
    if cuda:
        nccl = torch.cuda.nccl.version()
        info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["gpu_driver"] = _nvidia_driver()
    return info


def image_info() -> dict:
    return {name: os.environ.get(name) for name in IMAGE_VARIABLES}


def node() -> dict:
    """What differs from node to node: code, software, hardware and image of this host."""
    return {
        "git": git_info(),
        "python": platform.python_version(),
        **torch_info(),
        "cpu": cpu_info(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "image": image_info(),
    }


def repository(reference: str) -> str:
    """registry/path of an image reference, as Docker reads it: no tag or digest, docker.io
    when the first component names no host."""
    name = reference.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    name = f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]
    first = name.split("/", 1)[0]
    if "/" in name and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"docker.io/{name}" if "/" in name else f"docker.io/library/{name}"


def base_problem(image: dict, allowed: tuple[str, ...] = ()) -> str | None:
    """Why the image's base (``MTB_BASE_IMAGE``) is untrusted: neither official nor declared."""
    base = image.get("MTB_BASE_IMAGE")
    if not base:
        return None
    repo = repository(base)
    if any(repo == entry or repo.startswith(f"{entry}/") for entry in OFFICIAL_BASES + allowed):
        return None
    return (
        f"the image's base {base} is not from a pinned official repository "
        f"({', '.join(OFFICIAL_BASES)}); declare its registry with "
        f"--allow-registry {repo.split('/', 1)[0]}"
    )


def evidence_problems(git: dict, image: dict, allowed: tuple[str, ...] = ()) -> list[str]:
    """Why a result could not be traced to one commit and a trusted image: what
    ``--evidence formal`` refuses. ``allowed``: registries the user declared."""
    revision = git.get("revision")
    problems = []
    if not revision:
        problems.append("no git revision (mtb is not run from a git checkout)")
    elif git.get("dirty"):
        problems.append("the git tree has uncommitted changes")
    built_from = image.get("MTB_IMAGE_REVISION")
    if revision and built_from and built_from != revision:
        problems.append(f"the image was built from {built_from}, HEAD is {revision}")
    return problems + [p for p in (base_problem(image, allowed),) if p]


def allowed_registries(text: str | None) -> tuple[str, ...]:
    """``--allow-registry`` (comma-separated) as a tuple of registries or repositories."""
    return tuple(part.strip().rstrip("/") for part in (text or "").split(",") if part.strip())


def unverified_allowed() -> bool:
    return os.environ.get(ALLOW_UNVERIFIED_VARIABLE) == "1"


def check_evidence(mode: str, allowed: tuple[str, ...] = ()) -> None:
    """Refuse a formal run whose provenance has problems, unless explicitly allowed."""
    from mtb.errors import UsageError

    if mode != "formal" or unverified_allowed():
        return
    problems = evidence_problems(git_info(), image_info(), allowed)
    if problems:
        raise UsageError(
            f"evidence: formal runs need a clean, identified checkout and image: "
            f"{'; '.join(problems)} "
            f"(set {ALLOW_UNVERIFIED_VARIABLE}=1 to run anyway, marked unverified)"
        )


def evidence_fields(mode: str, provenance: dict) -> dict:
    """``evidence`` and ``verified`` of a result: None when exploratory (never checked)."""
    problems = provenance.get("evidence_problems") or []
    return {"evidence": mode, "verified": None if mode == "exploratory" else not problems}


def collect(plugins: list[dict], allowed: tuple[str, ...] = ()) -> dict:
    """The provenance block of a result document (start and end are added by the caller).

    ``allowed``: the registries the run declared (``--allow-registry``).
    """
    from mtb import gpu_guard

    here = node()
    return {
        "command": command_line(),
        **here,
        "evidence_problems": evidence_problems(here["git"], here["image"], allowed),
        "gpu_guard": gpu_guard.recorded(),
        "plugins": plugins,
    }
