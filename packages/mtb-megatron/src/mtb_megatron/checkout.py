"""The pinned Megatron-LM checkout: its HEAD must be the ref the user named.

mtb reads the checkout with ``git`` and never changes it: a HEAD that is not
the pinned ref is refused with both commits named, so results always say
which Megatron produced them.
"""

import os
import re
import subprocess
from pathlib import Path

import attrs

from mtb.api import ConfigError

ENTRY_SCRIPT = "pretrain_gpt.py"
PACKAGE_INFO = "megatron/core/package_info.py"
DIR_VARIABLE = "MEGATRON_DIR"
GIT_TIMEOUT_S = 30


@attrs.frozen
class Checkout:
    """A verified checkout: where it is, the ref asked for, the commit it resolves to,
    and its megatron-core version (which decides how its log lines are read)."""

    path: str
    ref: str
    commit: str
    dirty: bool
    core_version: str

    @property
    def script(self) -> Path:
        return Path(self.path) / ENTRY_SCRIPT

    def to_dict(self) -> dict:
        return attrs.asdict(self)


def _git(path: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(path), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def core_version(path: Path) -> str | None:
    """MAJOR.MINOR.PATCH plus PRE_RELEASE of the checkout's package_info.py, read as text."""
    try:
        text = (path / PACKAGE_INFO).read_text()
    except OSError:
        return None
    parts = {
        m[1]: m[2]
        for m in re.finditer(r"^(MAJOR|MINOR|PATCH|PRE_RELEASE) = ['\"]?(\w*)", text, re.M)
    }
    if not all(parts.get(k, "").isdigit() for k in ("MAJOR", "MINOR", "PATCH")):
        return None
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}{parts.get('PRE_RELEASE', '')}"


def resolve_dir(value: str) -> Path:
    """``--megatron-dir``, else $MEGATRON_DIR; refused when neither names a directory."""
    text = value or os.environ.get(DIR_VARIABLE, "")
    if not text:
        raise ConfigError("megatron_dir", f"give --megatron-dir or set {DIR_VARIABLE}")
    path = Path(text).expanduser().resolve()
    if not path.is_dir():
        raise ConfigError("megatron_dir", f"{text} is not a directory")
    return path


def verify(directory: str, ref: str) -> Checkout:
    """The checkout at ``directory`` if its HEAD is ``ref``; a ConfigError naming both otherwise."""
    path = resolve_dir(directory)
    if not ref:
        raise ConfigError("megatron_ref", "give --megatron-ref: the commit, tag or branch to pin")
    head = _git(path, "rev-parse", "--verify", "HEAD^{commit}")
    if head is None:
        raise ConfigError("megatron_dir", f"{path} is not a git checkout with a commit")
    pinned = _git(path, "rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}")
    if pinned is None:
        raise ConfigError("megatron_ref", f"{ref!r} is not a commit, tag or branch of {path}")
    if pinned != head:
        raise ConfigError(
            "megatron_ref",
            f"HEAD of {path} is {head}, but --megatron-ref {ref} is {pinned}; "
            "check out the pinned ref yourself (mtb never changes the checkout)",
        )
    if not (path / ENTRY_SCRIPT).is_file():
        raise ConfigError("megatron_dir", f"{path} has no {ENTRY_SCRIPT}")
    version = core_version(path)
    if version is None:
        raise ConfigError(
            "megatron_dir",
            f"{path} has no readable {PACKAGE_INFO}: mtb reads Megatron's log lines by the "
            "megatron-core release that prints them",
        )
    status = _git(path, "status", "--porcelain", "--untracked-files=no")
    return Checkout(str(path), ref, head, dirty=bool(status), core_version=version)
