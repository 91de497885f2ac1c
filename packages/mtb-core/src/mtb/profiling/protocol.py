"""What core calls on a profiler: the contract a registered profiler fulfils.

Core enters ``profiler.session(context, directory)`` around the profiled
trial, calls ``step()`` after every step (warmup steps included, so a
profiler that honours ``[profile]``'s schedule can count them), and after
the session reads ``path`` (this rank's trace) and ``summary`` (a dict the
trace analysis combines across ranks, or None).
"""

from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class ProfileSession(Protocol):
    """One profiled trial on one rank (a context manager)."""

    path: Path
    summary: dict | None

    def __enter__(self) -> "ProfileSession": ...

    def __exit__(self, *exc_info) -> bool | None: ...

    def step(self) -> None: ...


@runtime_checkable
class Profiler(Protocol):
    """A registered profiler: a name, a description, and a session per trial."""

    name: str
    description: str

    def session(self, context, directory: Path) -> ProfileSession: ...
