"""Bad input: one line naming the field, exit 2, nothing launched (in-process CLI)."""

import pytest
from click.testing import CliRunner

COMMON = ["--megatron-ref", "v0.1-fake"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--topology", "2"], "topology: '2' is not TPxPP"),
        (["run", "--topologies", "1x1,2x1"], "topology: run takes one TPxPP; use mtb megatron"),
        (["matrix", "--topologies", "4x1", "--nproc-per-node", "2"],
         "topologies: 4x1 needs TP x PP = 4"),
        (["run", "--topology", "1x1", "--global-batch-size", "3", "--nproc-per-node", "2"],
         "global_batch_size: 3 must be divisible by micro_batch_size x DP = 1 x 2"),
        (["run", "--topology", "1x2", "--num-layers", "3", "--nproc-per-node", "2"],
         "num_layers: 3 must be divisible by PP=2"),
        (["run", "--hidden-size", "100"],
         "hidden_size: 100 must be divisible by num_attention_heads=12"),
        (["run", "--log-interval", "60"], "log_interval: must be <= train_iters=50"),
        (["run", "--repeats", "0"], "repeats: must be >= 1, got 0"),
        (["run", "--nproc-per-node", "0"], "launch.nproc_per_node: must be >= 1"),
        (["run", "--evidence", "performance"], "repeats: performance evidence needs at least 3"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(cli, checkout, args, message):
    where = ["--megatron-dir", str(checkout["path"])]
    result = CliRunner().invoke(cli, ["megatron", *args, *where, *COMMON])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {message}"), result.output
    assert "Traceback" not in result.output


def test_every_command_has_help(cli):
    for path in (["run"], ["matrix"], ["topology"]):
        result = CliRunner().invoke(cli, ["megatron", *path, "--help"])
        assert result.exit_code == 0 and "--timeout" in result.output, result.output
    result = CliRunner().invoke(cli, ["megatron", "matrix", "--help"])
    assert "--megatron-ref" in result.output and "--dry-run" in result.output


def test_topology_check_without_megatron_core_is_one_line(cli, monkeypatch):
    from mtb_megatron import topology_check

    monkeypatch.setattr(topology_check, "_megatron_core_installed", lambda: False)
    result = CliRunner().invoke(cli, ["megatron", "topology", "--world-size", "2"])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: megatron-core is not installed: pip install 'mtb-megatron[megatron-core]'"
    )


def test_building_the_megatron_commands_does_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys\nfrom mtb.cli import make_cli\nfrom mtb.plugins import build_plugin_manager\n"
        "cli = make_cli(build_plugin_manager())\nassert 'megatron' in cli.commands\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron')]"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.timeout(60)
def test_output_is_checked_before_anything_runs(cli, tmp_path):
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "topology.json"
    result = CliRunner().invoke(cli, ["megatron", "topology", "--output", str(out)])
    assert result.exit_code == 2, result.output
    problem = f"{tmp_path / 'file'} is not a directory"
    assert result.output.strip() == f"Error: --output: {out}: {problem}"
