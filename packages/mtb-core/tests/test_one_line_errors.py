"""Edge cases that used to print a traceback, a C++ stack or nothing: one clear line each.

Issue 19, item 11.
"""

import re
import socket
from pathlib import Path

import pytest
from conftest import TINY, mtb_subprocess, read_json
from rich.table import Table

from mtb.plugins import build_plugin_manager

ROOT = Path(__file__).resolve().parents[3]


def single_error_line(result, exit_code: int = 2) -> str:
    assert result.exit_code == exit_code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_toml_saved_with_a_byte_order_mark_is_one_line(invoke, tmp_path, encoding):
    config = tmp_path / "run.toml"
    config.write_bytes('strategy = "single"\n'.encode(encoding))
    line = single_error_line(invoke("run", "--config", config, "--print-config"))
    assert f"is not UTF-8 text (it starts with a {encoding.upper()} byte-order mark)" in line


@pytest.mark.timeout(60)
def test_checkpoint_verify_of_a_plain_file_says_it_is_not_a_directory(invoke, tmp_path):
    plain = tmp_path / "step_00000002"
    plain.write_text("x")
    line = single_error_line(invoke("checkpoint", "verify", plain))
    assert line == f"Error: LEFT: {plain} is not a directory (give a step_N checkpoint)"


@pytest.mark.timeout(60)
def test_checkpoint_verify_of_two_into_a_directory_is_one_line(invoke, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    args = ["checkpoint", "verify", tmp_path / "a", tmp_path / "b", "-o", tmp_path]
    line = single_error_line(invoke(*args))
    assert line == f"Error: --output: {tmp_path}: is a directory; give a file name"


@pytest.mark.timeout(60)
def test_load_plugins_naming_no_installed_plugin_warns(monkeypatch, capsys):
    monkeypatch.setenv("MTB_LOAD_PLUGINS", "nonexistent")
    build_plugin_manager()
    warning = capsys.readouterr().err.strip()
    assert warning.startswith("mtb: warning: MTB_LOAD_PLUGINS: no installed plugin is named")
    assert "'nonexistent'" in warning and "\n" not in warning


@pytest.mark.timeout(60)
def test_load_plugins_naming_no_installed_plugin_is_fatal_when_strict(monkeypatch):
    from mtb.errors import PluginError

    monkeypatch.setenv("MTB_LOAD_PLUGINS", "nonexistent")
    monkeypatch.setenv("MTB_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="no installed plugin is named 'nonexistent'"):
        build_plugin_manager()


def install_hints_with_extras() -> list[str]:
    """Every ``pip install NAME[EXTRA]`` hint in the packages' sources."""
    pattern = re.compile(r"pip install '?[\w.-]+\[[\w,-]+\]'?")
    sources = (ROOT / "packages").glob("*/src/**/*.py")
    return sorted({m for path in sources for m in pattern.findall(path.read_text())})


@pytest.mark.timeout(60)
def test_every_install_hint_keeps_its_extra_on_every_console(capsys):
    from mtb.console import print_wide, progress_line, stdout
    from mtb.doctor.document import table as doctor_table

    hints = install_hints_with_extras()
    assert "pip install 'mtb-megatron[gpu]'" in hints and len(hints) >= 3
    for hint in hints:
        progress_line(f"hint: ({hint})")
        stdout.print(f"hint: ({hint})")
        grid = Table()
        grid.add_column("message")
        grid.add_row(hint)
        print_wide(grid)
        check = {"area": "software", "name": "x", "status": "warn", "message": hint}
        stdout.print(doctor_table({"verdict": "warn", "checks": [check]}))
        printed = capsys.readouterr()
        assert printed.err.count(f"({hint})") == 1, printed.err
        assert printed.out.count(hint) == 3, printed.out


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_metadata_hint_verifies_one_checkpoint_against_its_digests(invoke, tmp_path):
    """The command metadata.md advises runs as written, and catches an altered file."""
    ckpt = tmp_path / "ck"
    run = ["run", "--strategy", "single", *TINY, "--save-every", "2", "--checkpoint-dir", ckpt]
    assert invoke(*run, "--output", tmp_path / "r.json").exit_code == 0
    step = ckpt / "step_00000004"
    hint = re.search(r"`(mtb checkpoint verify [^`]+)`", (step / "metadata.md").read_text())
    argv = hint.group(1).replace("DIR", str(ckpt)).split()[1:]
    out = tmp_path / "verify.json"
    result = invoke(*argv, "-o", out)
    assert result.exit_code == 0, result.output
    assert "intact: READY" in result.output
    assert read_json(out)["status"] == "ok" and read_json(out)["step"] == 4
    payload = step / "train_state.json"
    payload.write_bytes(payload.read_bytes()[:-1] + b"\0")
    result = invoke(*argv, "-o", tmp_path / "again.json")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"diagnosis written to {tmp_path / 'again.json'}",
        f"Error: {step}: files do not match metadata.json: "
        f"{payload.name}: SHA256 differs from metadata.json",
    ]


@pytest.fixture
def port_in_use():
    """A local port someone else holds: the rendezvous cannot host its store there."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(0)
    yield f"127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("where", ["unroutable", "port in use"])
@pytest.mark.slow
def test_doctor_toward_an_unanswering_address_is_one_line(tmp_path, port_in_use, where):
    """TEST-NET-2 (RFC 5737) is never routed: the store client retries until the timeout."""
    endpoint = "198.51.100.1:29561" if where == "unroutable" else port_in_use
    args = ["doctor", "--nnodes", 2, "--node-rank", 0, "--rdzv-endpoint", endpoint]
    done = mtb_subprocess([*args, "--timeout", 10, "--output", tmp_path / "d.json"])
    assert done.returncode == 1, done.stderr
    assert "frame #" not in done.stderr and done.stderr.strip() == "", done.stderr[-2000:]
    check = next(c for c in read_json(tmp_path / "d.json")["checks"] if c["name"] == "rendezvous")
    assert check["status"] == "fail" and f"ranks at {endpoint}: " in check["message"]
    assert "\n" not in check["message"]


class Writes:
    """A stream that keeps every write call apart, as an unbuffered pipe does."""

    def __init__(self):
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.timeout(30)
def test_a_ranks_line_and_a_warning_are_one_write_each(monkeypatch):
    """Ranks share the launcher's stderr: a line in two writes can be split by another rank's
    (seen as `...(char 40))mtb: rank 0: ...` with the rank 0 line lost to its parser)."""
    from mtb import errors, lifeline

    stream = Writes()
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    lifeline.record("corrupt metadata")
    errors.warn("slow disk")
    assert stream.calls == ["mtb: rank 1: corrupt metadata\n", "mtb: warning: slow disk\n"]
