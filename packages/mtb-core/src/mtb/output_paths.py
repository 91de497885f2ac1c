"""Every output path a command will write, checked before any work starts.

A run that trains for an hour and then cannot write its result has lost the
hour; so each command names its output files and directories up front and
gets one UsageError line (``OPTION: PATH: problem``, exit 2) for the first
that cannot be written. Nothing is created here: a directory that does not
exist yet is judged by its nearest existing ancestor.
"""

import os
import tempfile
from pathlib import Path

from mtb.errors import UsageError

#: a path longer than this is shown by its first characters (the message stays one line)
SHOWN_CHARS = 120


def _refuse(option: str, path, problem: str):
    shown = str(path) if len(str(path)) <= SHOWN_CHARS else f"{str(path)[:SHOWN_CHARS]}..."
    raise UsageError(f"{option}: {shown}: {problem}")


def _existing_ancestor(path: Path) -> Path:
    """The deepest part of ``path`` (itself included) that exists (``/`` at worst)."""
    return next(p for p in (path, *path.parents) if os.path.lexists(p))


def _check_length(option: str, path, target: Path, anchor: Path) -> None:
    """Each name within NAME_MAX and the whole within PATH_MAX of ``anchor``'s file system."""
    name_max = os.pathconf(anchor, "PC_NAME_MAX")
    path_max = os.pathconf(anchor, "PC_PATH_MAX")
    too_long = next((p for p in target.parts if len(os.fsencode(p)) > name_max), None)
    if too_long:
        _refuse(option, path, f"a name is longer than {name_max} bytes ({too_long[:24]}...)")
    if len(os.fsencode(str(target))) >= path_max:
        _refuse(option, path, f"the path is longer than {path_max - 1} bytes")


def _probe(option: str, path, directory: Path) -> None:
    """Create (and drop) a nameless file in ``directory``: the one test the kernel answers."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as error:
        _refuse(option, path, f"cannot create files in {directory} ({error.strerror})")


def _check_creatable(option: str, path, target: Path) -> None:
    """``target`` could be created: short enough names, under a directory we can write."""
    ancestor = _existing_ancestor(target.parent)
    _check_length(option, path, target, ancestor if ancestor.is_dir() else ancestor.parent)
    if not ancestor.is_dir():
        _refuse(option, path, f"{ancestor} is not a directory")
    _probe(option, path, ancestor)


def check_file(option: str, path, *, overwrite: bool = True) -> None:
    """``path`` can be written as a file (replacing an existing one only if ``overwrite``)."""
    target = Path(path).absolute()
    _check_creatable(option, path, target)
    if target.is_dir():
        _refuse(option, path, "is a directory; give a file name")
    if os.path.lexists(target) and not overwrite:
        _refuse(option, path, "already exists; pass --overwrite to replace it or choose another")


def check_directory(option: str, path) -> None:
    """``path`` is, or can be created as, a directory this process may write in."""
    target = Path(path).absolute()
    _check_creatable(option, path, target)
    if target.exists() and not target.is_dir():
        _refuse(option, path, "exists and is not a directory")
    if target.is_dir():
        _probe(option, path, target)


def check_run(config) -> None:
    """A run's result file, checkpoint directory and profile directory."""
    from mtb.profiling.run import profile_dir

    check_file("--output", config.output, overwrite=config.overwrite)
    if config.checkpoint.dir:
        check_directory("--checkpoint-dir", config.checkpoint.dir)
    if config.profile.enabled:
        check_directory("--profile-dir", profile_dir(config))
