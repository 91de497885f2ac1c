"""The suite's timing tables, from what the last ``nox`` run kept in results/test-timings/.

Each nox test session writes its pytest JUnit XML (every test's duration) and
its set-up time (``<session>.setup_s``: installs before pytest starts). This
prints two markdown tables, the slowest tests and each session's set-up and
test time; ``--write docs/testing.md`` puts them between that file's
``<!-- durations -->`` markers instead.

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


def tables(folder: Path, slowest: int) -> str:
    junits = sorted(folder.glob("*.xml"))
    if not junits:
        raise SystemExit(f"error: no JUnit files in {folder}: run nox first")
    rows = [row for junit in junits for row in test_rows(junit)]
    lines = [f"The {slowest} slowest of {len(rows)} tests:", ""]
    lines += ["| s | session | test |", "|---:|---|---|"]
    for seconds, session, test_id in sorted(rows, reverse=True)[:slowest]:
        lines.append(f"| {seconds:.1f} | {session} | `{test_id}` |")
    lines += ["", "| session | set-up s | tests | test s |", "|---|---:|---:|---:|"]
    for junit in junits:
        setup = folder / f"{junit.stem}.setup_s"
        mine = [row[0] for row in rows if row[1] == junit.stem]
        setup_s = setup.read_text().strip() if setup.exists() else "?"
        lines.append(f"| {junit.stem} | {setup_s} | {len(mine)} | {sum(mine):.0f} |")
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
    args = parser.parse_args(argv)
    text = tables(args.timings, args.slowest)
    if args.write:
        write_between_markers(args.write, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
