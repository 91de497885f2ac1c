"""The reporter contract and atomic writing of what reporters render."""

import os
import tempfile
from pathlib import Path


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

    def render(self, documents: list[dict]) -> str:
        """The file's text; every reporter overrides it."""
        raise NotImplementedError(f"reporter {self.name!r} does not implement render()")


def write_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename.

    A reader sees either the old file or the complete new one, never a prefix.
    The file gets the usual permissions (0666 less the umask), not mkstemp's 0600.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
