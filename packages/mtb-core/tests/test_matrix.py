"""Experiment matrices: a 4-cell CPU matrix with a timeout and an OOM, resume after a kill.

Cells are real ``mtb run`` processes of the tiny preset with one rank, so
each costs a few seconds; the spec, plan and report checks need no process.
"""

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import PLUGIN_DIR, read_json

from mtb import hookimpl
from mtb.matrix.cells import expand
from mtb.matrix.spec import from_dict, parse_override, with_overrides
from mtb.reporting import Reporter

pytestmark = pytest.mark.timeout(240)

BASE = """
timeout_s = 120

[options]
preset = "tiny"
steps = 3
warmup_steps = 1
device = "cpu"
peak_tflops = 1
"""
FOUR = f"""
name = "four"
{BASE}
[[include]]
seed = 1

[[include]]
seed = 2

[[include]]
strategy = "test-slow"
timeout = 3

[[include]]
vocab_size = 8000000
memory_limit_per_rank = "800MiB"
"""
SLOW = {"MTB_PLUGIN_MODULES": "mtb_test_slow"}


def matrix_process(args, env=None):
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(PLUGIN_DIR), child_env.get("PYTHONPATH")])
    )
    return subprocess.Popen(
        [sys.executable, "-m", "mtb", "matrix", "run", *map(str, args)],
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process, timeout=200):
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


@pytest.mark.slow(reason="four cells, one of them waits out its timeout")
def test_four_cells_end_ok_ok_timeout_oom_and_the_matrix_goes_on(tmp_path):
    spec = tmp_path / "four.toml"
    spec.write_text(FOUR)
    rc, out, err = finish(matrix_process([spec, "--output-dir", tmp_path / "out"], SLOW))
    assert rc == 0, err
    matrix = read_json(tmp_path / "out" / "matrix.json")
    assert (matrix["kind"], matrix["status"]) == ("matrix", "ok")
    assert matrix["counts"] == {"ok": 2, "failed": 0, "oom": 1, "timeout": 1, "skipped": 0}
    rows = {row["cell"]: row for row in matrix["cells"]}
    slow = rows["strategy=test-slow,timeout=3"]
    assert (slow["status"], slow["error_class"]) == ("timeout", "timeout")
    assert slow["error"] == "launch exceeded launch.timeout_s=3 s"
    oom = rows["vocab_size=8000000,memory_limit_per_rank=800MiB"]
    assert (oom["status"], oom["error_class"]) == ("oom", "cpu_oom")
    assert "can't allocate memory" in oom["error"]
    assert oom["model_state_bytes"] is None and oom["model_state_estimate_bytes"] > 800 * 2**20
    assert 0 < oom["process_peak_rss_bytes"] < 800 * 2**20
    cell = read_json(tmp_path / "out" / oom["result"])
    assert (cell["status"], cell["error_class"]) == ("oom", "cpu_oom")
    for name in ("seed=1", "seed=2"):
        row = rows[name]
        assert row["status"] == "ok" and row["tokens_per_s"] > 0
        assert row["model_state_estimate_bytes"] == 34_688 * 16  # fp32 params, grads, AdamW
        assert row["model_state_bytes"] == pytest.approx(34_688 * 16, rel=1e-3)
        assert abs(row["model_state_estimate_error"]) < 1e-3 and row["peak_rss_bytes"] > 0
    assert "matrix four: 2 ok, 1 oom, 1 timeout" in out
    assert "strategy=test-slow,timeout=3: timeout (timeout)" in err
    assert not list((tmp_path / "out" / "running").glob("*"))


@pytest.mark.slow(reason="a matrix killed mid-way, then resumed: two launches")
def test_a_killed_matrix_resumes_running_only_the_missing_cells(tmp_path):
    spec = tmp_path / "three.toml"
    spec.write_text(f'name = "three"\n{BASE}\n[axes]\nseed = [1, 2, 3]\n')
    out = tmp_path / "out"
    first = out / "cells" / "seed=1.json"
    process = matrix_process([spec, "--output-dir", out])
    deadline = time.monotonic() + 150
    while not first.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    rc, _, err = finish(process)
    assert rc == 1 and "matrix interrupted by SIGTERM" in err, err
    assert read_json(out / "matrix.json")["status"] == "failed"
    done_before = {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    assert "seed=1.json" in done_before and len(done_before) < 3
    assert not list((out / "running").glob("*")), "an interrupted cell must not look complete"

    refused, _, err = finish(matrix_process([spec, "--output-dir", out]))
    assert refused == 2 and "--resume" in err

    rc, _, err = finish(matrix_process([spec, "--output-dir", out, "--resume"]))
    assert rc == 0, err
    matrix = read_json(out / "matrix.json")
    assert matrix["status"] == "ok" and matrix["counts"]["ok"] == 3
    reused = {row["cell"] for row in matrix["cells"] if row["reused"]}
    assert reused == {name.removesuffix(".json") for name in done_before}
    for name, mtime in done_before.items():
        assert (out / "cells" / name).stat().st_mtime_ns == mtime


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "x"\nrepeat = 2\n', "m.toml: repeat: unknown key; allowed: name, description,"),
        ('name = "x"\nrepeats = 0\n', "m.toml: repeats: must be >= 1, got 0"),
        ('name = "X y"\n', "m.toml: name: 'X y' must be lower-case letters, digits, . _ -"),
        ('name = "x"\n[axes]\nstrategy = "ddp"\n', "m.toml: axes.strategy: must be a list"),
        ('name = "x"\n[axes]\nseed = []\n', "m.toml: axes.seed: must list at least one value"),
        ('name = "x"\n[options]\noutput = "a.json"\n', "m.toml: options.output: is set by the"),
        ('name = "x"\n[options]\nsteps = [1]\n', "m.toml: options.steps: must be a string,"),
        ('name = "x"\ntimeout_s = "long"\n', "m.toml: timeout_s: expected a number, got 'long'"),
        ("name = \n", "matrix: m.toml is not valid TOML"),
    ],
)
def test_matrix_file_mistakes_are_one_line(invoke, tmp_path, monkeypatch, text, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.toml").write_text(text)
    result = invoke("matrix", "show", "m.toml")
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: {message}"), result.output
    assert len(result.output.strip().splitlines()) == 1


def test_cells_are_the_product_of_the_axes_plus_includes_less_excludes():
    spec = from_dict(
        {
            "name": "m",
            "repeats": 2,
            "options": {"preset": "tiny", "nproc-per-node": 2},
            "axes": {"strategy": ["ddp", "fsdp"], "precision": ["fp32", "bf16"]},
            "exclude": [{"strategy": "fsdp", "precision": "bf16"}],
            "include": [{"strategy": "single", "nproc_per_node": 1}],
        },
        "m",
    )
    cells = expand(spec)
    assert [c.id for c in cells[:2]] == [
        "strategy=ddp,precision=fp32,repeat=1",
        "strategy=ddp,precision=fp32,repeat=2",
    ]
    assert len(cells) == 2 * (3 + 1)
    single = cells[-1]
    assert single.options == {"preset": "tiny", "nproc_per_node": 1, "strategy": "single"}
    assert single.world_size == 1
    assert single.argv() == ["--preset", "tiny", "--nproc-per-node", "1", "--strategy", "single"]
    fixed = with_overrides(spec, [parse_override("precision=bf16"), parse_override("steps=3")])
    assert {c.options["precision"] for c in expand(fixed)} == {"bf16"}
    assert expand(fixed)[0].options["steps"] == 3


def test_show_skips_what_this_machine_cannot_host_and_notes_unknown_options(
    invoke, pm, tmp_path, monkeypatch
):
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    import mtb_test_allreduce

    pm.register(mtb_test_allreduce, name="mtb_test_allreduce")
    (tmp_path / "m.toml").write_text(
        'name = "m"\n[options]\npreset = "tiny"\nstrategy = "test-allreduce"\n'
        "[[include]]\nnproc_per_node = 2\n[[include]]\nnproc_per_node = 4\n"
        '[[include]]\ndevice = "cuda"\n[[include]]\nstrategy = "nope"\n'
        '[[include]]\nno_such_flag = 1\n[[include]]\nnnodes = 2\nrdzv_endpoint = "h:1"\n'
    )
    result = invoke("matrix", "run", tmp_path / "m.toml", "--dry-run", "--max-ranks", "2")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "skip: needs 4 ranks; this machine runs at most 2 on cpu" in text
    assert "skip: needs CUDA; this machine has no CUDA device" in text
    assert "skip: strategy 'nope' is not installed" in text
    assert "mtb run has no option --no-such-flag; the cell will fail" in text
    assert "skip: needs 2 nodes" in text
    assert "542.00 KiB" in text  # the estimate: 34,688 parameters x 16 bytes
    assert not (tmp_path / "results").exists()


class Markdown(Reporter):
    name, suffix = "markdown", ".md"

    def render(self, documents):
        return "\n".join(f"{d['kind']}: {d['status']}" for d in documents)


class ReporterPlugin:
    @hookimpl
    def mtb_register_reporters(self, register):
        register(Markdown())


def test_the_matrix_ends_with_a_report_when_a_markdown_reporter_is_installed(invoke, pm, tmp_path):
    (tmp_path / "m.toml").write_text('name = "m"\n[options]\nnproc_per_node = 64\n')
    out = tmp_path / "out"
    result = invoke("matrix", "run", tmp_path / "m.toml", "--output-dir", out)
    assert result.exit_code == 0 and not (out / "report.md").exists()
    pm.register(ReporterPlugin(), name="reporter")
    result = invoke("matrix", "run", tmp_path / "m.toml", "--output-dir", out)
    assert result.exit_code == 0
    assert (out / "report.md").read_text() == "matrix: ok"
    matrix = read_json(out / "matrix.json")
    assert matrix["counts"]["skipped"] == 1
    assert matrix["cells"][0]["error"].startswith("needs 64 ranks")


def test_presets_ship_as_package_data_and_load(invoke):
    result = invoke("matrix", "presets")
    names = [line.split(":")[0] for line in result.output.splitlines()]
    expected = ["gradient-sync", "memory-pressure", "moe", "moe-comm", "parallelism"]
    expected += ["parallelism-8gpu", "profile", "scaling"]
    assert names == sorted([*expected, "stability", "zero"])
    result = invoke("matrix", "show", "--preset", "moe-comm")
    assert "skip: mtb comm is not installed" in " ".join(result.output.split())
    assert invoke("matrix", "show", "--preset", "nope").output.startswith(
        "Error: --preset: 'nope' is not one of: gradient-sync,"
    )
