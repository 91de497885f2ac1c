"""The reporter contract and atomic writing of what reporters render."""

import copy
import fcntl
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: read once at import: changing the umask is process-wide and racy between threads
_FILE_MODE = 0o666 & ~_current_umask()


class Reporter:
    """Renders result documents (dicts) into one file format."""

    name: str = ""
    description: str = ""
    suffix: str = ""
    #: True when rendered text is added to the end of an existing file (a log
    #: such as JSON Lines) instead of replacing it
    appends: bool = False
    #: settings it adds to ``mtb run`` and ``[reporter_options]`` (mtb.options.Option)
    options: ClassVar[tuple] = ()
    _given: Mapping[str, Any] = MappingProxyType({})

    @property
    def settings(self) -> dict[str, Any]:
        """The value of each of ``options`` for this rendering: as configured, else default."""
        return {o.name: self._given.get(o.name, o.default) for o in self.options}

    def configured(self, given: Mapping[str, Any]) -> "Reporter":
        """A copy that renders with the option values in ``given`` (the run's reporter_options)."""
        clone = copy.copy(self)
        clone._given = MappingProxyType(dict(given))
        return clone

    def render(self, documents: list[dict]) -> str:
        """The file's text; every reporter overrides it."""
        raise NotImplementedError(f"reporter {self.name!r} does not implement render()")


def _temp_copy(target: Path, text: str) -> str:
    """``text`` in a synced temporary file beside ``target``, with the usual permissions."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def write_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename.

    A reader sees either the old file or the complete new one, never a prefix.
    The file gets the usual permissions (0666 less the umask), not mkstemp's 0600.
    """
    target = Path(path)
    tmp = _temp_copy(target, text)
    try:
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def fresh_names(target: Path) -> Iterator[Path]:
    """``target``, then ``NAME-2.SUFFIX``, ``NAME-3.SUFFIX``, ... beside it."""
    yield target
    number = 2
    while True:
        yield target.with_name(f"{target.stem}-{number}{target.suffix}")
        number += 1


def write_new(path: str | os.PathLike, text: str) -> Path:
    """Publish ``text`` at ``path`` only if no file is there, else at the first free fresh name.

    The complete temporary file is hard-linked to its name (link never replaces
    an existing file), so of two writers racing for one path exactly one gets
    it and the other's text lands beside it: nothing is overwritten or lost.
    Returns the path written.
    """
    tmp = _temp_copy(Path(path), text)
    names = fresh_names(Path(path))
    try:
        while True:
            candidate = next(names)
            try:
                os.link(tmp, candidate)
            except FileExistsError:
                continue
            return candidate
    finally:
        Path(tmp).unlink(missing_ok=True)


def append_whole(path: str | os.PathLike, text: str) -> Path:
    """Add ``text`` to the end of ``path`` (created if missing) all or nothing.

    Under an exclusive lock, so concurrent appenders (parallel runs sharing one
    log) never interleave; a write that fails half way (disk full) is cut off
    again, so the file never ends in a torn line. A file whose last line lacks
    its newline gets one first, so two documents never share a line.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        data = text.encode()
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)
    return target


def publish(reporter: Reporter, documents: list[dict], path: str | os.PathLike) -> Path:
    """``documents`` rendered by ``reporter`` at ``path``: appended if it appends, else replaced."""
    text = reporter.render(documents)
    return append_whole(path, text) if reporter.appends else write_atomic(path, text)
