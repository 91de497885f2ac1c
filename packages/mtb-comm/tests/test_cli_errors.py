"""Bad input: one line naming the field, exit 2, nothing launched (in-process CLI)."""

import pytest
from click.testing import CliRunner

from mtb.cli import make_cli
from mtb.plugins import build_plugin_manager


@pytest.fixture(scope="module")
def cli():
    return make_cli(build_plugin_manager())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["comm", "--sizes", "1X"], "sizes: '1X' is not a size"),
        (["comm", "--operations", "all_reduce,gather"], "operations: 'gather' is not one of"),
        (["comm", "--iters", "0"], "iters: must be >= 1, got 0"),
        (["comm", "--nproc-per-node", "0"], "launch.nproc_per_node: must be >= 1"),
        (["comm", "--group-size", "3", "--nproc-per-node", "4"], "group_size: 3 must divide"),
        (["tp", "mlp", "--hidden", "33", "--nproc-per-node", "2"], "hidden: 33 must be divisible"),
        (["tp", "check", "--dtypes", "float16"], "dtypes: 'float16' is not one of"),
        (["moe", "route", "--experts", "3", "--nproc-per-node", "2"], "experts: 3 must be"),
        (["moe", "route", "--top-k", "3"], "top_k: must be < 3, got 3"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, args, message):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {message}"), result.output
    assert "Traceback" not in result.output


def test_every_command_has_help(cli):
    for path in (["comm"], ["tp", "check"], ["tp", "mlp"], ["tp", "sequence"], ["moe", "route"]):
        result = CliRunner().invoke(cli, [*path, "--help"])
        assert result.exit_code == 0 and "--nproc-per-node" in result.output


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", [["comm"], ["tp", "check"], ["moe", "route"]])
def test_output_is_checked_before_anything_is_launched(cli, tmp_path, command):
    result = CliRunner().invoke(cli, [*command, "--output", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"Error: --output: {tmp_path}: is a directory; give a file name"
