"""Fixtures: a Megatron-like git checkout built by the test, and the CLI over the real plugins."""

import shutil
import subprocess
from pathlib import Path

import pytest

from mtb.cli import make_cli
from mtb.plugins import build_plugin_manager

FAKE = Path(__file__).with_name("fake_pretrain_gpt.py")
# the head of megatron/core/package_info.py at core_v0.16.1
PACKAGE_INFO = 'MAJOR = 0\nMINOR = 16\nPATCH = 1\nPRE_RELEASE = ""\n'
GIT = ["git", "-c", "user.name=mtb", "-c", "user.email=mtb@example.invalid"]


def git(path: Path, *args: str) -> str:
    done = subprocess.run(
        [*GIT, "-C", str(path), *args], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.strip()


@pytest.fixture(scope="session")
def checkout(tmp_path_factory) -> dict:
    """A git repository: ``old`` (a README), ``no-version`` (pretrain_gpt.py) and HEAD,
    ``v0.1-fake``, which adds megatron-core 0.16.1's package_info.py."""
    path = tmp_path_factory.mktemp("megatron-lm")
    git(path, "init", "-q")
    (path / "README.md").write_text("Megatron-like checkout for tests\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "first")
    git(path, "tag", "old")
    shutil.copy(FAKE, path / "pretrain_gpt.py")
    git(path, "add", "pretrain_gpt.py")
    git(path, "commit", "-q", "-m", "pretrain_gpt.py")
    git(path, "tag", "no-version")
    info = path / "megatron" / "core" / "package_info.py"
    info.parent.mkdir(parents=True)
    info.write_text(PACKAGE_INFO)
    git(path, "add", "megatron")
    git(path, "commit", "-q", "-m", "package_info.py")
    git(path, "tag", "v0.1-fake")
    return {
        "path": path,
        "head": git(path, "rev-parse", "HEAD"),
        "old": git(path, "rev-parse", "old"),
    }


@pytest.fixture(scope="session")
def cli():
    return make_cli(build_plugin_manager())
