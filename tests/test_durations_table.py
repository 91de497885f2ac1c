""".ci/durations.py: the slowest tests and each session's set-up time, from nox's JUnit files."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / ".ci" / "durations.py"

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="{n}" time="{wall}">{cases}</testsuite></testsuites>
"""


def write_session(folder: Path, name: str, setup_s: str, times: dict[str, float], wall=9) -> None:
    cases = "".join(
        f'<testcase classname="tests.test_x" name="{test}" time="{seconds}"/>'
        for test, seconds in times.items()
    )
    (folder / f"{name}.xml").write_text(JUNIT.format(n=len(times), wall=wall, cases=cases))
    (folder / f"{name}.setup_s").write_text(f"{setup_s}\n")


def durations(*args) -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPT), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_tables_list_the_slowest_first_and_each_sessions_setup(tmp_path):
    write_session(tmp_path, "tests-core", "41.5", {"test_a": 0.5, "test_b": 70.25}, wall=40.4)
    write_session(tmp_path, "tests-report", "12.0", {"test_c": 3.0})
    document = tmp_path / "testing.md"
    document.write_text("# T\n<!-- durations -->\nold\n<!-- /durations -->\nafter\n")
    done = durations("--timings", tmp_path, "--slowest", "2", "--write", document)
    assert done.returncode == 0, done.stderr
    text = document.read_text()
    assert "old" not in text and text.endswith("<!-- /durations -->\nafter\n")
    assert "The 2 slowest of 3 tests:" in text
    slowest = [line for line in text.splitlines() if line.startswith("| 70.2")]
    assert slowest == ["| 70.2 | tests-core | `tests.test_x::test_b` |"]
    assert text.index("test_b") < text.index("test_c") and "test_a`" not in text
    assert "| tests-core | 41.5 | 2 | 71 | 40 |" in text  # two workers: wall under the sum
    assert "| tests-report | 12.0 | 1 | 3 | 9 |" in text


def test_ids_are_listed_per_session_sorted_for_a_diff(tmp_path):
    write_session(tmp_path, "tests-core", "1", {"test_b": 1.0, "test_a": 2.0})
    write_session(tmp_path, "plugin_example", "1", {"test_c": 1.0})
    done = durations("--timings", tmp_path, "--ids")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "plugin_example: tests.test_x::test_c",
        "tests-core: tests.test_x::test_a",
        "tests-core: tests.test_x::test_b",
    ]


def test_no_timings_is_one_line_and_exit_1(tmp_path):
    done = durations("--timings", tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: no JUnit files in {tmp_path}: run nox first"
