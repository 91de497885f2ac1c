"""The reporter contract and atomic writing of what reporters render."""

import os
import tempfile
from pathlib import Path


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
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
