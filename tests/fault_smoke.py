"""The fault smoke's scenarios in two halves, one a test module, and what their tests share.

``mtb fault smoke`` runs its scenarios one after another (about 20 launches
of the tiny preset). One smoke of all of them kept one of the two pytest
workers busy for longer than the rest of tests/ together (``--dist loadfile``
gives a module to one worker), so test_fault_smoke.py and
test_fault_smoke_damage.py each run one half, about the same time, through
``--scenarios``: the two modules go to the two workers. Each half makes its own
uninterrupted reference run (every scenario but nan and two-writers compares
with it); the default of ``--scenarios``, every scenario, is checked in-process.
"""

import json
import re
import subprocess
import sys

RANK_LINE = re.compile(r"^mtb: rank (\d+): ")

#: the smoke's scenarios, in its order, split into halves of about equal time
CRASHES = ["nan", "kill-during-save", "config-mismatch", "rank-crash", "auto-recovery"]
DAMAGE = ["launcher-kill", "corrupt", "retention", "stale-steps", "two-writers", "disk-full"]


def run_smoke(tmp_path_factory, scenarios: list[str]):
    """``mtb fault smoke --scenarios ...``: (process, document, scenario name -> scenario)."""
    root = tmp_path_factory.mktemp("fault")
    output = root / "fault.json"
    flags = ["--scenarios", ",".join(scenarios), "--output", output, "--timeout", "90"]
    done = subprocess.run(
        [sys.executable, "-m", "mtb", "fault", "smoke", "--workdir", root / "runs", *flags],
        capture_output=True,
        text=True,
        timeout=1440,
    )
    document = json.loads(output.read_text())
    return done, document, {s["name"]: s for s in document["scenarios"]}


def check_document(smoke, scenarios: list[str]) -> None:
    """The document lists the scenarios asked for, in order; its exit code follows its status."""
    done, document, by_name = smoke
    assert list(by_name) == scenarios
    assert document["kind"] == "fault" and document["schema_version"] >= 1
    assert document["provenance"]["torch"] and document["provenance"]["end_utc"]
    assert document["reference"]["state_digests"]["model"]
    assert done.returncode == (0 if document["status"] == "ok" else 1), done.stderr
    assert "mtb fault smoke" in done.stdout and scenarios[-1] in done.stdout
    launches = [launch for scenario in by_name.values() for launch in scenario["launches"]]
    assert all(launch["exit_code"] is not None for launch in launches)


def passed(scenarios, name) -> dict:
    scenario = scenarios[name]
    failed = [c for c in scenario["checks"] if not c["ok"]]
    assert scenario["status"] == "passed", (failed, scenario["error"], scenario["launches"])
    return scenario


def detail(scenario, starts: str):
    return next(c["detail"] for c in scenario["checks"] if c["check"].startswith(starts))
