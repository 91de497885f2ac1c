"""Megatron on a GPU as it is launched there: the pinned ref by default, the PyTorch fallback
without Transformer Engine, and the busy-GPU refusal of performance runs, each shown by
--dry-run before anything runs."""

import json
import os
import re
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import git

from mtb_megatron import transformer, validity
from mtb_megatron.config import DEFAULT_REF, MegatronConfig

ROOT = Path(__file__).resolve().parents[3]
SMALL = ["--num-layers", "2", "--global-batch-size", "4", "--nproc-per-node", "2"]


@pytest.fixture
def engine(monkeypatch):
    """Transformer Engine importable (True) or not (False) for the command under test."""

    def set_to(available: bool):
        monkeypatch.setattr(transformer, "engine_available", lambda: available)

    return set_to


def dry_run(cli, checkout, *args, ref=("--megatron-ref", "v0.1-fake")):
    argv = ["megatron", "run", "--megatron-dir", str(checkout["path"]), *ref, *SMALL, *args]
    return CliRunner().invoke(cli, [*argv, "--dry-run"])


def test_the_default_ref_is_the_tag_of_the_megatron_core_the_image_installs():
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    image = re.search(r"^ARG MEGATRON_CORE=(\S+)", dockerfile, re.M)[1]
    assert (f"core_v{image}", image) == (DEFAULT_REF, "0.18.2")
    assert '"megatron-core[training]==${MEGATRON_CORE}"' in dockerfile
    assert MegatronConfig().megatron_ref == DEFAULT_REF
    # the CPU machines' topology checks keep the newest release for Python 3.11
    cpu = re.search(r"^megatron-core==(\S+)", (ROOT / "constraints.txt").read_text(), re.M)[1]
    assert cpu == "0.16.1"


def test_without_megatron_ref_the_default_pin_is_checked_and_shown(cli, checkout, engine):
    engine(True)
    git(checkout["path"], "tag", "-f", DEFAULT_REF)
    result = dry_run(cli, checkout, ref=())
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first == (
        f"# Megatron-LM {DEFAULT_REF} (the default: the megatron image's megatron-core) "
        f"at {checkout['head']}, megatron-core 0.16.1"
    )


def test_transformer_engine_runs_tensor_parallel_with_sequence_parallelism(cli, checkout, engine):
    engine(True)
    result = dry_run(cli, checkout, "--topology", "2x1")
    assert result.exit_code == 0, result.output
    command = result.output.strip().splitlines()[-1]
    assert "--transformer-impl transformer_engine --mock-data" in command
    assert command.endswith("--sequence-parallel")
    assert "# transformer: transformer_engine (Transformer Engine is importable)" in result.output
    one = dry_run(cli, checkout, "--topology", "1x1").output.strip().splitlines()[-1]
    assert "--sequence-parallel" not in one  # nothing to split the sequence over at TP 1


def test_without_transformer_engine_the_pytorch_fallback_has_no_sequence_parallelism(
    cli, checkout, engine
):
    engine(False)
    result = dry_run(cli, checkout, "--topology", "2x1")
    assert result.exit_code == 0, result.output
    command = result.output.strip().splitlines()[-1]
    assert "--transformer-impl local --mock-data" in command
    assert "--sequence-parallel" not in command
    assert (
        "# transformer: local, the PyTorch fallback (Transformer Engine is not importable): "
        "no sequence parallelism, compatibility evidence only"
    ) in result.output


def test_the_fallback_is_refused_as_performance_evidence(cli, checkout, engine):
    engine(False)
    result = dry_run(cli, checkout, "--evidence", "performance", "--repeats", "3")
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: transformer_impl: local is the PyTorch fallback (Transformer Engine is not "
        "importable): compatibility evidence only; performance evidence needs Transformer Engine"
    )


def test_the_fallback_is_a_reason_the_result_is_not_performance_evidence():
    choice = transformer.choose("local")
    reasons = validity.assess([], "compatibility", {"problem": None}, {"transformer": choice})
    assert "transformer_impl local, the PyTorch fallback (--transformer-impl local): " in (
        " ".join(reasons)
    )


@pytest.fixture
def busy_gpu(tmp_path, monkeypatch):
    """An nvidia-smi on PATH that lists GPU 0 with 3 GiB held by another process (pid 4242)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text(
        '#!/bin/bash\ncase "$1" in\n'
        '  --query-gpu=*) echo "0, GPU-a, 3072" ;;\n'
        '  --query-compute-apps=*) echo "GPU-a, 4242, 3072" ;;\n'
        "esac\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    monkeypatch.delenv("ALLOW_BUSY_GPUS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_performance_runs_refuse_gpus_other_processes_use(
    cli, checkout, engine, busy_gpu, tmp_path
):
    engine(True)
    out = tmp_path / "never.json"
    performance = ["--evidence", "performance", "--repeats", "3", "--output", str(out)]
    shown = dry_run(cli, checkout, *performance)
    assert shown.exit_code == 0, shown.output
    assert (
        "# busy GPUs: refused before the launch (--evidence performance; "
        "ALLOW_BUSY_GPUS=1 overrides)"
    ) in shown.output
    argv = ["megatron", "run", "--megatron-dir", str(checkout["path"]), "--megatron-ref"]
    result = CliRunner().invoke(cli, [*argv, "v0.1-fake", *SMALL, *performance])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: launch.device: GPU 0 (3.0 GiB) already in use by other processes (limit 1 GiB); "
        "wait for them or set ALLOW_BUSY_GPUS=1"
    )
    assert not out.exists() and not out.with_name("never.logs").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_allowed_busy_gpus_run_and_the_guard_is_recorded(
    cli, checkout, engine, busy_gpu, tmp_path, monkeypatch
):
    engine(True)
    monkeypatch.setenv("ALLOW_BUSY_GPUS", "1")
    monkeypatch.setenv("FAKE_MEGATRON_MODE", "ok")
    out = tmp_path / "allowed.json"
    argv = ["megatron", "run", "--megatron-dir", str(checkout["path"]), "--nproc-per-node", "1"]
    argv += ["--num-layers", "2", "--global-batch-size", "4"]
    argv += ["--evidence", "performance", "--repeats", "3", "--train-iters", "2"]
    argv += ["--log-interval", "1", "--timeout", "60", "--output", str(out)]
    result = CliRunner().invoke(cli, [*argv, "--megatron-ref", "v0.1-fake"])
    assert result.exit_code == 1, result.output  # ran; not valid evidence here (no NVML)
    document = json.loads(out.read_text())
    assert [r["status"] for r in document["runs"]] == ["ok"] * 3
    guard = document["provenance"]["gpu_guard"]
    assert guard["allowed_busy"] and guard["busy"][0]["foreign_bytes"] == 3 * 2**30
    assert document["transformer"] == {
        "requested": "auto", "used": "transformer_engine", "fallback_reason": None
    }  # fmt: skip
