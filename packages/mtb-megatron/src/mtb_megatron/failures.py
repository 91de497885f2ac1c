"""Why a Megatron launch failed, with the log line that shows it.

The kinds are checked in order of causality: a timeout is known from the
launcher itself; an out-of-memory error is often followed by NCCL errors of
the peers, so it is looked for first; NaN and import/setup errors next, then
a failed assertion (Megatron checks its arguments with ``assert`` in
``validate_args``); anything else that exited non-zero is ``unknown`` with
its last exception line, never torchrun's ``ChildFailedError`` summary.

Patterns match error messages only: with ``TORCH_CPP_LOG_LEVEL=INFO``,
ProcessGroupNCCL prints its options at start-up (``TIMEOUT(ms): 600000``,
``TORCH_NCCL_ASYNC_ERROR_HANDLING: 3``), which are no failure.
"""

import re

KINDS = ("oom", "communication", "timeout", "import", "nan", "assertion", "unknown")
RANK_PREFIX = r"^(\[rank\d+\]:\s*)?"
PATTERNS = (
    (
        "oom",
        re.compile(
            r"OutOfMemoryError|CUDA out of memory|out of memory|can't allocate memory", re.I
        ),
    ),
    (
        "communication",
        re.compile(
            r"NCCL error|nccl(Internal|System|Unhandled|Invalid|Remote)\w*Error|DistBackendError"
            r"|Watchdog caught collective|watchdog got stuck|Timeout at NCCL work"
            r"|NCCL communicator was aborted",
        ),
    ),
    (
        "nan",
        re.compile(
            r"found NaN|NaN detected|loss is nan|Rank \d+: found (NaN|Inf)|is NaN|nan in loss",
            re.I,
        ),
    ),
    (
        "import",
        re.compile(
            r"ModuleNotFoundError|ImportError|No module named|unrecognized arguments"
            r"|error: argument",
        ),
    ),
    ("assertion", re.compile(RANK_PREFIX + r"AssertionError\b")),
)
#: a Python exception line (``ValueError: ...``), torchrun's own summary aside
EXCEPTION = re.compile(RANK_PREFIX + r"([\w.]+\.)?\w*(Error|Exception)\b(?<!ChildFailedError)")
BORDER = re.compile(r"^\s*([=-])\1{9,}\s*$")
#: the status a failure kind gets in core's statuses (ok, failed, oom, timeout, skipped)
STATUS = {"oom": "oom", "timeout": "timeout"}


def _first_match(pattern, streams: dict[str, list[str]]) -> dict | None:
    for stream in ("stderr", "stdout"):
        for number, line in enumerate(streams[stream], start=1):
            if pattern.search(line):
                return {"stream": stream, "line_number": number, "line": line.strip()}
    return None


def _last_line(streams: dict[str, list[str]]) -> dict | None:
    """The last exception line; without one, the last line that is not blank or a border."""
    for shown in (EXCEPTION.search, lambda line: line.strip() and not BORDER.match(line)):
        for stream in ("stderr", "stdout"):
            lines = streams[stream]
            for number in range(len(lines), 0, -1):
                if shown(lines[number - 1]):
                    where = {"stream": stream, "line_number": number}
                    return {**where, "line": lines[number - 1].strip()}
    return None


def _failure(kind: str, where: dict | None, detail: str = "") -> dict:
    where = where or {"stream": None, "line_number": None, "line": None}
    return {"kind": kind, **where, "detail": detail or None}


def classify(
    exit_code: int | None, timed_out: bool, streams: dict[str, list[str]], iterations: list[dict]
) -> dict | None:
    """The failure of one launch (kind, stream, line number, line), or None when it is fine.

    A launch that exits 0 still fails when Megatron counted NaN iterations
    or printed no iteration line at all.
    """
    if timed_out:
        return _failure("timeout", _last_line(streams), "killed after the launch's timeout")
    if exit_code == 0:
        nan_lines = [r for r in iterations if r.get("nan_iterations")]
        if nan_lines:
            found = _first_match(re.compile(r"number of nan iterations:\s*[1-9]"), streams)
            return _failure("nan", found, "Megatron counted NaN iterations")
        if not iterations:
            return _failure("unknown", _last_line(streams), "no iteration line in the log")
        return None
    for kind, pattern in PATTERNS:
        found = _first_match(pattern, streams)
        if found:
            return _failure(kind, found)
    return _failure("unknown", _last_line(streams), f"exit code {exit_code}")


def status_of(failure: dict | None) -> str:
    return "ok" if failure is None else STATUS.get(failure["kind"], "failed")
