"""The offline install next to an existing torch (deploy/wheelhouse.py), for real.

A fresh virtual environment plays the GPU image: torch, pip and the
packages the image lists, with everything they depend on, are already
there, and nothing of mtb's. They are this test's own installed
distributions, made visible to the new environment through a .pth file
that names a folder of links to them (a --system-site-packages limited to
the image's packages): installing torch into a new environment again would
take a minute or more of a test that CI runs. The wheelhouse install then
runs with pip's configuration switched off (no index, no find-links but the
wheelhouse), must leave that torch exactly as it was, and ``mtb run`` must
train. Building the wheelhouse needs the package index.
"""

import importlib.util
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from conftest import ROOT

SCRIPT = ROOT / "deploy" / "wheelhouse.py"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _module():
    spec = importlib.util.spec_from_file_location("wheelhouse", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(*argv, env=None, timeout=600):
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, f"{argv}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def closure(names) -> list[metadata.Distribution]:
    """The installed distributions ``names`` and everything they require here."""
    from packaging.requirements import Requirement

    queue, found = list(names), {}
    while queue:
        requirement = Requirement(queue.pop())
        name = requirement.name.lower().replace("_", "-")
        if name in found or (requirement.marker and not requirement.marker.evaluate()):
            continue
        found[name] = metadata.distribution(name)
        queue += [r for r in found[name].requires or [] if "extra ==" not in r]
    return list(found.values())


def installed(name: str) -> bool:
    try:
        return bool(metadata.distribution(name))
    except metadata.PackageNotFoundError:
        return False


#: the image's packages that this environment has (the others go into the test's wheelhouse)
IMAGE_HAS = [name for name in _module().IMAGE_HAS if installed(name)]


def image(venv: Path) -> Path:
    """A new environment that already has torch, pip and the image's packages (linked)."""
    run(sys.executable, "-m", "venv", "--without-pip", str(venv))
    links = venv / "image-packages"
    links.mkdir()
    for dist in closure(["torch", "pip", *IMAGE_HAS]):
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            source = Path(str(dist.locate_file(top)))
            if top not in ("..", "__pycache__") and source.exists() and not (links / top).exists():
                (links / top).symlink_to(source)
    python = venv / "bin" / "python"
    purelib = run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    (Path(purelib.strip()) / "image.pth").write_text(f"{links}\n")
    return python


def torch_of(python) -> str:
    probe = "from importlib import metadata as m; d = m.distribution('torch'); "
    probe += "print(d.version, d.locate_file(''))"
    return run(str(python), "-c", probe).strip()


def test_requirements_are_read_from_the_packages_without_torch_or_mtb():
    wheelhouse = _module()
    names = {wheelhouse.requirement_name(r) for r in wheelhouse.requirements()}
    assert {"cattrs", "tomli-w", "pluggy", "nvidia-ml-py", "matplotlib", "megatron-core"} <= names
    assert not {n for n in names if n == "torch" or n.startswith("mtb-")}
    lacking = {wheelhouse.requirement_name(r) for r in wheelhouse.wanted(wheelhouse.IMAGE_HAS, ())}
    assert lacking == {"cattrs", "tomli-w", "setuptools"}


@pytest.mark.slow(
    reason="a fresh environment installed offline, then a run; 69 s seen on a loaded machine"
)
def test_mtb_installs_offline_next_to_an_existing_torch_and_trains(tmp_path):
    wheelhouse, venv = tmp_path / "wheelhouse", tmp_path / "image"
    built = [sys.executable, str(SCRIPT), "build", "--wheelhouse", str(wheelhouse)]
    run(*built, "--python-version", PYTHON, "--image-has", ",".join(IMAGE_HAS))
    manifest = json.loads((wheelhouse / "MANIFEST.json").read_text())
    files = [w["file"] for w in manifest["wheels"]]
    assert not [f for f in files if f.startswith(("torch-", "numpy-"))], files
    assert {f.split("-")[0] for f in files} >= {"cattrs", "tomli_w", "setuptools"}
    cattrs = next(wheelhouse.glob("cattrs-*.whl"))
    needs = {v: _module()._dependencies(cattrs, v) for v in ("3.10", "3.12")}
    assert any(r.startswith("exceptiongroup") for r in needs["3.10"])  # markers are the target's
    assert not any(r.startswith("exceptiongroup") for r in needs["3.12"])

    python = image(venv)
    before = torch_of(python)
    assert before.endswith("image-packages")  # the image's torch, seen through the link

    offline = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    offline.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1")
    said = run(str(python), str(SCRIPT), "install", "--wheelhouse", str(wheelhouse), env=offline)
    assert "(unchanged)" in said
    assert torch_of(python) == before

    result = tmp_path / "tiny.json"
    train = [str(venv / "bin" / "mtb"), "run", "--preset", "tiny", "--steps", "3"]
    run(*train, "--warmup-steps", "1", "--output", str(result), env=offline)
    document = json.loads(result.read_text())
    assert document["status"] == "ok"
    assert document["config"]["training"]["steps"] == 3


def test_install_refuses_an_environment_without_torch(tmp_path):
    venv = tmp_path / "bare"
    run(sys.executable, "-m", "venv", "--without-pip", str(venv))
    (tmp_path / "wh").mkdir()
    (tmp_path / "wh" / "MANIFEST.json").write_text("{}")
    command = [str(venv / "bin" / "python"), str(SCRIPT), "install", "--wheelhouse"]
    done = subprocess.run([*command, str(tmp_path / "wh")], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.startswith("wheelhouse install: torch is not installed")
    assert "Traceback" not in done.stderr
