"""Install mtb next to a torch that is already there, with no network: a wheelhouse.

A GPU image (or cluster container) brings its own CUDA build of torch and
often no internet. Installing mtb the usual way would let pip resolve torch
again; this script instead

- ``build``s, on a machine with a package index, a small folder of wheels
  (``wheelhouse/`` at the repository root, kept out of git) holding what
  mtb needs and such an image lacks, for the image's Python (3.12 by
  default), plus a MANIFEST.json listing each file, its size and SHA256;
- prints the ``requirements`` of the mtb packages less torch, for an image
  that installs them from an index before the packages with ``--no-deps``
  (the megatron image keeps NGC's torch that way);
- ``install``s, on the image, from the checkout and that folder only
  (``pip install --no-index``): the missing dependencies from the
  wheelhouse, then the mtb packages from their source folders with
  ``--no-deps --no-build-isolation``. torch is never a requirement of
  either step, and its version and location are compared before and after:
  a change is an error.

Only the standard library is needed on the image (``install`` reads the
packages' pyproject.toml files with tomllib). ``build`` uses pip and the
``packaging`` library of the machine it runs on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEELHOUSE = ROOT / "wheelhouse"
MANIFEST = "MANIFEST.json"
#: the distributions installed, in dependency order (the example plugin is not one of them)
PACKAGES = ("mtb-core", "mtb-strategies", "mtb-comm", "mtb-megatron", "mtb-report")
#: extras whose requirements the image needs: NVML (mtb doctor, Megatron's memory samples) and
#: megatron-core (its GPU check)
EXTRAS = ("gpu", "megatron-core")
#: what the GPU image already has (besides torch), as pip names them
IMAGE_HAS = ("pluggy", "click", "attrs", "rich", "matplotlib", "psutil", "nvidia-ml-py", "numpy")
#: compiled packages the wheelhouse never carries: the image's own builds are kept
IMAGE_COMPILED = ("torch", "numpy", "matplotlib", "psutil")
#: what builds the mtb packages without build isolation (their build-system requirement)
BUILD_REQUIREMENTS = ("setuptools>=77",)
PYTHON_VERSION = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64")


class InstallError(Exception):
    """A one-line reason the build or the install stopped."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return canonical(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)[1])


def package_dirs() -> list[Path]:
    return [ROOT / "packages" / name for name in PACKAGES]


def requirements(extras: tuple[str, ...] = EXTRAS) -> list[str]:
    """The mtb packages' run-time requirements and ``extras``, less torch and mtb itself."""
    found: dict[str, str] = {}
    for folder in package_dirs():
        project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
        optional = project.get("optional-dependencies", {})
        listed = project["dependencies"] + [r for e in extras for r in optional.get(e, [])]
        for requirement in listed:
            name = requirement_name(requirement)
            if name != "torch" and not name.startswith("mtb-"):
                found.setdefault(name, requirement.split(";")[0].strip())
    return sorted(found.values())


def pins(path: Path) -> dict[str, str]:
    """name -> ``name==version`` from a constraints file."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {requirement_name(line): line for line in lines if "==" in line}


def _download(requirement: str, into: Path, python_version: str) -> Path:
    """One wheel for the target Python and platform, without its dependencies."""
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", python_version, *platforms, "--dest", str(into)]
    done = subprocess.run([*command, requirement], capture_output=True, text=True)
    if done.returncode:
        said = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        raise InstallError(f"pip download {requirement}: {said[-1]}")
    name = requirement_name(requirement)
    return next(p for p in into.glob("*.whl") if canonical(p.name.split("-")[0]) == name)


def _dependencies(wheel: Path, python_version: str) -> list[str]:
    """Requires-Dist of ``wheel`` that apply on Linux x86_64 under ``python_version``."""
    from packaging.requirements import Requirement

    environment = {
        "python_version": python_version,
        "python_full_version": f"{python_version}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "os_name": "posix",
        "extra": "",
    }
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode()
    listed = re.findall(r"^Requires-Dist: (.+)$", text, re.M)
    parsed = [Requirement(r) for r in listed]
    return [str(r).split(";")[0] for r in parsed if not r.marker or r.marker.evaluate(environment)]


def wanted(have: tuple[str, ...], extras: tuple[str, ...]) -> list[str]:
    """What the image lacks: mtb's requirements less ``have``, and the build backend."""
    missing = [r for r in requirements(extras) if requirement_name(r) not in map(canonical, have)]
    return [*missing, *BUILD_REQUIREMENTS]


def build(into: Path, python_version: str, have: tuple[str, ...], extras: tuple[str, ...]):
    """Download what the image lacks and its dependencies (never a compiled image package)."""
    into.mkdir(parents=True, exist_ok=True)
    for old in into.glob("*.whl"):  # a rebuild starts empty: no stale version is picked up
        old.unlink()
    pinned = pins(ROOT / "constraints.txt")
    queue, seen, wheels = wanted(have, extras), set(), []
    while queue:
        requirement = queue.pop(0)
        name = requirement_name(requirement)
        if name in seen or name in IMAGE_COMPILED:
            continue
        seen.add(name)
        wheel = _download(pinned.get(name, requirement), into, python_version)
        wheels.append(wheel)
        queue += _dependencies(wheel, python_version)
    manifest = {
        "python_version": python_version,
        "platforms": list(PLATFORMS),
        "image_has": sorted(have),
        "wheels": [_entry(w) for w in sorted(wheels)],
    }
    (into / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _entry(wheel: Path) -> dict:
    data = wheel.read_bytes()
    return {"file": wheel.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def torch_identity() -> tuple[str, str]:
    """(version, location) of the installed torch, read without importing it."""
    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        raise InstallError(
            "torch is not installed in this environment: this path installs mtb next to an "
            "existing torch (install torch first)"
        ) from None
    return dist.version, str(dist.locate_file(""))


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "install", *args])
    if done.returncode:
        raise InstallError(f"pip install {' '.join(args)} exited {done.returncode}")


def install(wheelhouse: Path, extras: tuple[str, ...]) -> str:
    """Dependencies from the wheelhouse, then the mtb packages from the checkout; torch kept."""
    if not (wheelhouse / MANIFEST).is_file():
        raise InstallError(f"{wheelhouse} has no {MANIFEST}: run deploy/wheelhouse.py build first")
    before = torch_identity()
    offline = ("--no-index", "--find-links", str(wheelhouse))
    _pip(*offline, *requirements(extras), *BUILD_REQUIREMENTS)
    for folder in package_dirs():  # setuptools reuses build/: a deleted module could ship
        shutil.rmtree(folder / "build", ignore_errors=True)
    _pip(*offline, "--no-deps", "--no-build-isolation", *map(str, package_dirs()))
    after = torch_identity()
    if after != before:
        raise InstallError(f"torch changed from {before} to {after}")
    return f"mtb {metadata.version('mtb-core')} installed next to torch {after[0]} (unchanged)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="download the wheels the image lacks")
    make.add_argument("--python-version", default=PYTHON_VERSION, help="the image's Python")
    make.add_argument("--image-has", default=",".join(IMAGE_HAS), help="comma-separated names")
    put = commands.add_parser("install", help="install mtb offline next to the existing torch")
    show = commands.add_parser("requirements", help="print mtb's requirements less torch")
    for command in (make, put, show):
        command.add_argument("--wheelhouse", type=Path, default=WHEELHOUSE)
        command.add_argument("--extras", default=",".join(EXTRAS), help="mtb extras to include")
    args = parser.parse_args(argv)
    extras = tuple(e for e in args.extras.split(",") if e)
    try:
        if args.command == "requirements":
            print("\n".join(requirements(extras)))
        elif args.command == "build":
            have = tuple(n for n in args.image_has.split(",") if n)
            manifest = build(args.wheelhouse, args.python_version, have, extras)
            for wheel in manifest["wheels"]:
                print(f"{wheel['bytes']:>10,}  {wheel['file']}")
            print(f"{sum(w['bytes'] for w in manifest['wheels']):>10,}  in {args.wheelhouse}")
        else:
            print(install(args.wheelhouse, extras))
    except InstallError as error:
        print(f"wheelhouse {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
