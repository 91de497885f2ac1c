"""The README's two commands: the main job runs (with a tiny preset) and CI runs the suite."""

import json
import shlex
import subprocess
from pathlib import Path

from conftest import ROOT, readme_block


def main_job_run(block: str) -> list[str]:
    """The ``mtb run`` invocation of the main-job command, as argv."""
    for part in block.replace("\\\n", " ").replace("&&", "\n").splitlines():
        argv = shlex.split(part.strip())
        if argv[:2] == ["mtb", "run"]:
            return argv
    raise AssertionError("the main-job command has no `mtb run`")


def shrunk(argv: list[str], out: Path) -> list[str]:
    """The same run with a tiny preset, few steps and a private output path."""
    values = {"--preset": "tiny", "--steps": "3", "--warmup-steps": "1", "--output": str(out)}
    result, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        result.append(arg)
        if arg in values:
            result.append(values.pop(arg))
            skip = True
    for flag, value in values.items():
        result += [flag, value]
    return result


def test_main_job_command_runs_with_a_tiny_preset(tmp_path):
    argv = main_job_run(readme_block("main-job"))
    assert "--preset" in argv and argv[argv.index("--preset") + 1] == "small"
    out = tmp_path / "result.json"
    done = subprocess.run(
        shrunk(argv, out), cwd=tmp_path, capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 0, done.stderr
    assert "tokens/s (global)" in done.stdout
    doc = json.loads(out.read_text())
    assert doc["status"] == "ok" and doc["config"]["preset"] == "tiny"
    assert doc["config"]["strategy"] == argv[argv.index("--strategy") + 1]


def test_ci_runs_exactly_the_test_suite_command():
    suite = [line for line in readme_block("test-suite").splitlines() if line.strip()]
    ci = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "set ", "cd "))
    ]
    assert ci == suite


def test_the_chinese_quickstart_gives_the_same_two_commands():
    for marker in ("main-job", "test-suite"):
        assert readme_block(marker, "README.zh-CN.md") == readme_block(marker)


def test_the_quickstart_starts_with_the_readme_commands():
    text = (ROOT / "docs" / "quickstart.md").read_text()
    install_and_run = readme_block("main-job").strip()
    suite = " && ".join(readme_block("test-suite").strip().splitlines())
    assert install_and_run in text and suite in text
