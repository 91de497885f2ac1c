"""The suite's timing tables, from what the last ``nox`` run kept in results/test-timings/.

Each nox test session writes its pytest JUnit XML (every test's duration) and
its set-up time (``<session>.setup_s``: installs before pytest starts). This
prints two markdown tables, the slowest tests and each session's set-up and
test time; ``--write docs/testing.md`` puts them between that file's
``<!-- durations -->`` markers instead. ``--ids`` lists every test id instead, one a
line and sorted, so that two runs' lists can be compared with ``diff``.

    nox && python .ci/durations.py --write docs/testing.md
"""

import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMINGS = ROOT / "results" / "test-timings"
BEGIN, END = "<!-- durations -->", "<!-- /durations -->"


def test_rows(junit: Path) -> list[tuple[float, str, str]]:
    """(seconds, session, test id) of every test case in one JUnit file, set-up included."""
    rows = []
    for case in ET.parse(junit).iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        rows.append((float(case.get("time", 0)), junit.stem, test_id))
    return rows


def suite_wall_s(junit: Path) -> float:
    """pytest's own wall time for the session (tests summed count each worker's share)."""
    return sum(float(suite.get("time", 0)) for suite in ET.parse(junit).iter("testsuite"))


def junit_files(folder: Path) -> list[Path]:
    junits = sorted(folder.glob("*.xml"))
    if not junits:
        raise SystemExit(f"error: no JUnit files in {folder}: run nox first")
    return junits


def test_ids(folder: Path) -> str:
    """Every session's test ids, ``session: id`` a line, sorted."""
    rows = [row for junit in junit_files(folder) for row in test_rows(junit)]
    return "".join(f"{session}: {test_id}\n" for _, session, test_id in sorted(rows, key=_id))


def _id(row: tuple[float, str, str]) -> tuple[str, str]:
    return row[1], row[2]


def tables(folder: Path, slowest: int) -> str:
    junits = junit_files(folder)
    rows = [row for junit in junits for row in test_rows(junit)]
    lines = [f"The {slowest} slowest of {len(rows)} tests:", ""]
    lines += ["| s | session | test |", "|---:|---|---|"]
    for seconds, session, test_id in sorted(rows, reverse=True)[:slowest]:
        lines.append(f"| {seconds:.1f} | {session} | `{test_id}` |")
    lines += ["", "| session | set-up s | tests | test s | pytest wall s |"]
    lines.append("|---|---:|---:|---:|---:|")
    for junit in junits:
        setup = folder / f"{junit.stem}.setup_s"
        mine = [row[0] for row in rows if row[1] == junit.stem]
        setup_s = setup.read_text().strip() if setup.exists() else "?"
        wall = f"{suite_wall_s(junit):.0f}"
        lines.append(f"| {junit.stem} | {setup_s} | {len(mine)} | {sum(mine):.0f} | {wall} |")
    return "\n".join(lines) + "\n"


def write_between_markers(document: Path, text: str) -> None:
    content = document.read_text()
    head, begin, rest = content.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"error: {document} has no {BEGIN} ... {END} markers")
    document.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timings", type=Path, default=TIMINGS, help="the folder nox wrote")
    parser.add_argument("--slowest", type=int, default=30, help="how many tests to list")
    parser.add_argument("--write", type=Path, help="a markdown file with durations markers")
    parser.add_argument("--ids", action="store_true", help="list the test ids, sorted")
    args = parser.parse_args(argv)
    text = test_ids(args.timings) if args.ids else tables(args.timings, args.slowest)
    if args.write:
        write_between_markers(args.write, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
