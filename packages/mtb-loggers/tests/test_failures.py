"""Loggers that cannot start cost one warning line each, never the result or the exit code."""

import pytest
from conftest import launch

LOGGERS = ("tensorboard", "wandb", "mlflow")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_loggers_that_cannot_create_their_directory_are_warnings_and_the_run_succeeds(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    done = launch(tmp_path, "--log-to", ",".join(LOGGERS), "--log-dir", blocker / "logs")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "metric logger" in line]
    assert len(warnings) == len(LOGGERS), done.stderr
    for name, line in zip(LOGGERS, warnings, strict=True):
        assert line.startswith(f"mtb: warning: metric logger {name!r} failed to start, "), line
    assert "Traceback" not in done.stderr
    assert done.document["status"] == "ok" and done.document["trials"][0]["steps"]
