"""CLI hygiene: start-up does not import torch; results are written atomically."""

import json
import subprocess
import sys

import pytest
from conftest import TINY, mtb_subprocess, read_json

from mtb import __version__
from mtb.reporting import write_atomic
from mtb.results import from_document, to_document

NO_TORCH = """
import sys
from mtb.cli import main
sys.argv = ["mtb", *{args!r}]
try:
    main()
except SystemExit as done:
    assert not done.code, done.code
assert "torch" not in sys.modules, "torch was imported"
print("NO-TORCH-OK")
"""


@pytest.mark.parametrize("args", [["--help"], ["plugins"], ["plugins", "--json"], ["--version"]])
def test_cli_start_up_does_not_import_torch(args):
    done = subprocess.run(
        [sys.executable, "-c", NO_TORCH.format(args=args)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "NO-TORCH-OK" in done.stdout


def test_write_atomic_replaces_whole_files_and_leaves_no_temporaries(tmp_path):
    target = tmp_path / "deep" / "r.json"
    write_atomic(target, "first")
    write_atomic(target, "second")
    assert target.read_text() == "second"
    assert [p.name for p in target.parent.iterdir()] == ["r.json"]


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    write_atomic(target, "good")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr("mtb.reporting.os.replace", broken_replace)
    with pytest.raises(OSError):
        write_atomic(target, "partial")
    assert target.read_text() == "good"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_result_document_round_trips_through_cattrs(invoke, tmp_path):
    out = tmp_path / "r.json"
    assert invoke("run", *TINY, "--output", out).exit_code == 0
    doc = read_json(out)
    result = from_document(doc)
    assert result.trials[0].per_rank[0].rank == 0
    assert to_document(result) == doc
    assert json.loads(json.dumps(to_document(result))) == doc


def test_a_clashing_plugin_is_skipped_and_every_command_still_works():
    env = {"MTB_PLUGIN_MODULES": "mtb_test_clash"}
    warning = (
        "mtb: warning: plugin 'mtb_test_clash' is skipped: strategy 'single' is registered by "
        f"both 'mtb.strategies.single' (mtb-core {__version__}) and 'mtb_test_clash' "
        "(unpackaged); uninstall one or exclude it with MTB_DISABLE_PLUGINS"
    )
    for args in (["--help"], ["--version"], ["plugins"]):
        done = mtb_subprocess(args, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip() == warning
    strict = mtb_subprocess(["--help"], env={**env, "MTB_STRICT_PLUGINS": "1"}, timeout=60)
    assert strict.returncode == 2
    assert strict.stderr.strip() == f"Error: {warning.removeprefix('mtb: warning: ')}"


@pytest.mark.slow
def test_one_process_runs_honour_the_timeout(tmp_path):
    out = tmp_path / "r.json"
    env = {"MTB_PLUGIN_MODULES": "mtb_test_slow"}
    args = ["run", "--strategy", "test-slow", *TINY, "--timeout", "3", "--output", out]
    done = mtb_subprocess(args, env=env, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == "Error: launch exceeded launch.timeout_s=3 s"
    assert read_json(out)["status"] == "timeout"


def test_registering_a_module_twice_is_harmless(monkeypatch):
    from mtb.plugins import DEFAULT_PLUGINS, build_plugin_manager

    monkeypatch.setenv("MTB_PLUGIN_MODULES", DEFAULT_PLUGINS[0])
    assert build_plugin_manager().registry("strategy").names()[0] == "single"
