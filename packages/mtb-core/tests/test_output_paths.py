"""Every output path is checked before any work starts: one line, exit 2, nothing written.

A bad path used to be found only when the result was written, after the
whole run, losing it (issue 19, item 3).
"""

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY, mtb_subprocess, read_json

RUN = ["run", "--strategy", "single", *TINY]


@pytest.fixture
def places(tmp_path):
    """A regular file, a directory and a read-only directory to aim outputs at."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    return tmp_path


def one_line_refusal(result, option: str, problem: str) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {option}: "), result.output
    assert problem in lines[0], lines[0]
    return lines[0]


BAD_FILES = {
    "a directory": ("dir", "is a directory"),
    "under a regular file": ("file/result.json", "is not a directory"),
    "a name past NAME_MAX": ("n" * 300 + ".json", "a name is longer than 255 bytes"),
    "a path past PATH_MAX": ("d/" * 2100 + "r.json", "the path is longer than"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", BAD_FILES)
def test_run_output_refused_before_training(invoke, places, case):
    relative, problem = BAD_FILES[case]
    result = invoke(*RUN, "--output", places / relative)
    one_line_refusal(result, "--output", problem)
    assert "tokens/s" not in result.output


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["run", "profile"])
def test_output_under_a_file_is_refused_by_run_and_profile(invoke, places, command):
    result = invoke(command, *TINY[:2], "--steps", "6", "--output", places / "file" / "r.json")
    one_line_refusal(result, "--output", "is not a directory")


@pytest.mark.timeout(120)
def test_checkpoint_dir_that_is_a_file_is_refused(invoke, places):
    result = invoke(*RUN, "--checkpoint-dir", places / "file", "--output", places / "r.json")
    one_line_refusal(result, "--checkpoint-dir", "exists and is not a directory")
    assert not (places / "r.json").exists()


@pytest.mark.timeout(120)
def test_profile_dir_under_a_file_is_refused(invoke, places):
    args = ["--preset", "tiny", "--steps", "6", "--output", places / "r.json"]
    result = invoke("profile", *args, "--profile-dir", places / "file" / "traces")
    one_line_refusal(result, "--profile-dir", "is not a directory")


@contextlib.contextmanager
def read_only_mount(path: Path):
    """A read-only tmpfs at ``path`` (root only; the test is skipped elsewhere)."""
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)])
    if done.returncode != 0:
        pytest.skip("mounting a read-only tmpfs needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


@pytest.mark.timeout(120)
def test_output_on_a_read_only_file_system_is_refused(invoke, tmp_path):
    with read_only_mount(tmp_path / "ro") as ro:
        result = invoke(*RUN, "--output", ro / "results" / "r.json")
        one_line_refusal(result, "--output", "Read-only file system")


@pytest.mark.timeout(120)
def test_existing_result_is_refused_unless_overwrite(invoke, places):
    out = places / "r.json"
    out.write_text('{"kept": true}')
    one_line_refusal(invoke(*RUN, "--output", out), "--output", "already exists")
    assert read_json(out) == {"kept": True}
    result = invoke(*RUN, "--output", out, "--overwrite")
    assert result.exit_code == 0, result.output
    assert read_json(out)["status"] == "ok"


@pytest.mark.timeout(120)
def test_checkpoint_verify_output_is_checked(invoke, places):
    result = invoke("checkpoint", "verify", places / "dir", "-o", places / "dir")
    one_line_refusal(result, "--output", "is a directory")


@pytest.mark.timeout(120)
def test_matrix_output_dir_under_a_file_is_refused(invoke, places):
    args = ["--set", "steps=2", "--output-dir", places / "file" / "m"]
    result = invoke("matrix", "run", "--preset", "stability", *args)
    one_line_refusal(result, "--output-dir", "is not a directory")


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_real_run_with_a_bad_output_trains_nothing(places):
    """A real ``mtb run`` over 2 ranks: refused in well under a training's time, no files."""
    started = time.monotonic()
    out = places / "file" / "r.json"
    args = ["run", "--strategy", "test-allreduce", "--nproc-per-node", 2, "--device", "cpu", *TINY]
    plugin = {"MTB_PLUGIN_MODULES": "mtb_test_allreduce", "MTB_LOAD_PLUGINS": ""}
    done = mtb_subprocess([*args, "--checkpoint-dir", places / "ck", "--output", out], plugin)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"Error: --output: {out}: {places / 'file'} is not a directory"
    ]
    assert "mtb run: strategy" not in done.stderr  # never announced, never launched
    assert not (places / "ck").exists() and time.monotonic() - started < 60


@pytest.mark.timeout(400)
@pytest.mark.slow
def test_two_concurrent_runs_on_one_output_keep_both_results(places):
    """Two real runs race for one --output: one gets it, the other's result lands beside it."""
    out = places / "same.json"
    args = ["run", "--strategy", "single", "--preset", "tiny", "--steps", "2"]
    args += ["--warmup-steps", "0", "--output", str(out)]
    env = {**os.environ, "MTB_LOAD_PLUGINS": ""}
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "mtb", *args, "--seed", str(seed)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    outputs = [child.communicate(timeout=300) for child in children]
    assert [child.returncode for child in children] == [0, 0], outputs
    kept = sorted(places.glob("same*.json"))
    assert [p.name for p in kept] == ["same-2.json", "same.json"]
    seeds = sorted(json.loads(p.read_text())["config"]["data"]["seed"] for p in kept)
    assert seeds == [1, 2]
    losers = [err for _, err in outputs if "written by another run meanwhile" in err]
    assert len(losers) == 1
    assert any(f"result written to {places / 'same-2.json'}" in o for o, _ in outputs)


@pytest.mark.timeout(60)
def test_default_output_never_names_an_existing_result(tmp_path, monkeypatch):
    from mtb.documents import default_output

    monkeypatch.chdir(tmp_path)
    first = Path(default_output("run", "single"))
    first.parent.mkdir()
    first.write_text("{}")
    second = Path(default_output("run", "single"))
    assert second != first and not second.exists()


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_runs_without_output_each_keep_their_default_result(invoke, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        result = invoke(*RUN)
        assert result.exit_code == 0, result.output
    written = sorted((tmp_path / "results").glob("run-*-single*.json"))
    assert len(written) == 2 and all(read_json(p)["status"] == "ok" for p in written)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "command", [["doctor", "--skip-connectivity"], ["fault", "smoke", "--scenarios", "nan"]]
)
def test_doctor_and_fault_outputs_are_checked_first(invoke, places, command):
    result = invoke(*command, "--output", places / "dir")
    one_line_refusal(result, "--output", "is a directory")
