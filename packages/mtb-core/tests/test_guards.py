"""Memory estimates and caps, the provenance gate, the busy-GPU guard, error classes."""

import json
import subprocess

import pytest
from conftest import TINY, read_json

from mtb import gpu_guard, hookimpl, provenance
from mtb.errors import UsageError
from mtb.memory import parse_size
from mtb.results import error_class, failure_status
from mtb.strategy import Strategy

TINY_PARAMETERS = 34_688
LARGE_PARAMETERS = 731_077_632


class OptimizerSharded(Strategy):
    """Test only: optimizer state split across ranks (ZeRO-1's layout)."""

    name = "test-os-sharded"
    sharded_states = ("optimizer_state",)


class ModelParallel(Strategy):
    """Test only: takes tp and pp, shards every state over the data-parallel ranks."""

    name = "test-model-parallel"
    parallel_dims = ("tp", "pp")
    sharded_states = ("parameters", "gradients", "optimizer_state")


class ShardedPlugin:
    @hookimpl
    def mtb_register_strategies(self, register):
        register(OptimizerSharded())
        register(ModelParallel())


def estimate(invoke, *args) -> dict:
    result = invoke("estimate-memory", "--json", *args)
    assert result.exit_code == 0, result.output
    return {row["strategy"]: row for row in json.loads(result.output)}


def test_estimates_match_hand_computed_bytes(invoke, pm):
    single = estimate(invoke, "--preset", "tiny")["single"]
    n = TINY_PARAMETERS
    assert (single["parameters"], single["gradients"], single["optimizer_state"]) == (
        4 * n,
        4 * n,
        8 * n,
    )
    assert single["total"] == 555_008  # 16 bytes per parameter
    assert estimate(invoke, "--preset", "tiny", "--optimizer", "sgd")["single"]["total"] == 8 * n
    pm.register(ShardedPlugin(), name="sharded")
    rows = estimate(invoke, "--preset", "large", "--world-size", "8")
    assert rows["single"]["note"] == "runs on at most 1 process(es)"
    sharded = rows["test-os-sharded"]
    big = LARGE_PARAMETERS
    assert sharded["optimizer_state"] == 8 * big // 8 == 731_077_632
    assert sharded["total"] == 4 * big + 4 * big + big == 6_579_698_688
    one = estimate(invoke, "--preset", "large", "--world-size", "8", "--strategy", "single")
    assert list(one) == ["single"]
    table = invoke("estimate-memory", "--preset", "large", "--world-size", "8").output
    assert "6.13 GiB" in table and "runs on at most 1 process(es)" in table
    refused = invoke("estimate-memory", "--strategy", "nope")
    assert refused.exit_code == 2
    assert refused.output.startswith("Error: unknown strategy 'nope'; installed: single")


def test_estimate_covers_tensor_and_pipeline_parallel_layouts(invoke, pm):
    pm.register(ShardedPlugin(), name="sharded")
    rows = estimate(invoke, "--preset", "tiny", "--world-size", "4", "--tp", "2")
    # a tiny block has 12,512 parameters in its split linears and 192 it keeps whole;
    # token embedding 256 x 32 split by rows, position embedding 32 x 32 and final norm 64
    # whole (the tied head adds none)
    per_rank = 2 * (12_512 // 2 + 192) + 256 * 32 // 2 + 32 * 32 + 64
    parallel = rows["test-model-parallel"]
    assert parallel["layout"] == "dp2·tp2"
    assert parallel["parameters"] == 4 * per_rank // 2  # sharded over dp_shard 2
    assert "cannot take tp 2" in rows["test-os-sharded"]["note"]
    pp2 = estimate(invoke, "--preset", "tiny", "--world-size", "2", "--pp", "2")
    staged = pp2["test-model-parallel"]
    # one block per stage; the first stage holds the embeddings, the larger end
    assert staged["parameters"] == 4 * (12_512 + 192 + 9_216)
    refused = invoke("estimate-memory", "--world-size", "4", "--tp", "3")
    assert refused.exit_code == 2
    assert "parallel.dp_shard: -1 needs dp_replicate 1 x cp 1 x tp 3" in refused.output


@pytest.mark.parametrize(
    ("text", "count"),
    [("2GiB", 2**31), ("1.5G", 3 * 2**29), ("512MiB", 2**29), ("800MB", 8 * 10**8), ("1024", 1024)],
)
def test_sizes(text, count):
    assert parse_size(text) == count


def test_a_bad_memory_limit_is_one_line(invoke):
    result = invoke("run", *TINY, "--memory-limit-per-rank", "lots", "--print-config")
    assert result.exit_code == 2
    assert result.output == (
        "Error: launch.memory_limit_per_rank: 'lots' is not a size like 2GiB, 512MiB, 1.5G "
        "or 800MB\n"
    )


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (
            "oom",
            "rank 0 failed: RuntimeError: DefaultCPUAllocator: can't allocate memory",
            "cpu_oom",
        ),
        ("oom", "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda_oom"),
        ("oom", "MemoryError", "cpu_oom"),
        ("timeout", "launch exceeded launch.timeout_s=3 s", "timeout"),
        ("failed", "rank 1 failed: RuntimeError: injected failure on rank 1", "RuntimeError"),
        ("failed", "rank 1 failed: exit code -9", "failed"),
        ("ok", None, None),
    ],
)
def test_error_classes(status, message, kind):
    assert error_class(status, message) == kind
    if message and status != "timeout":
        assert failure_status(message) == status


def git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, timeout=30)


def test_the_gate_names_a_dirty_tree_a_missing_revision_and_a_foreign_image(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "f.txt").write_text("one")
    git(tmp_path, "add", "f.txt")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    clean = provenance.git_info(tmp_path)
    assert provenance.evidence_problems(clean, {}) == []
    (tmp_path / "f.txt").write_text("two")
    dirty = provenance.git_info(tmp_path)
    assert provenance.evidence_problems(dirty, {}) == ["the git tree has uncommitted changes"]
    image = {"MTB_IMAGE_REVISION": "0" * 40}
    assert provenance.evidence_problems(clean, image) == [
        f"the image was built from {'0' * 40}, HEAD is {clean['revision']}"
    ]
    missing = provenance.evidence_problems({"revision": None}, {})
    assert missing == ["no git revision (mtb is not run from a git checkout)"]


@pytest.fixture
def dirty_checkout(monkeypatch):
    dirty = {"revision": "a" * 40, "dirty": True, "root": "/src"}
    monkeypatch.setattr(provenance, "git_info", lambda start=None: dirty)
    monkeypatch.delenv(provenance.ALLOW_UNVERIFIED_VARIABLE, raising=False)


def test_formal_evidence_refuses_a_dirty_tree(invoke, tmp_path, dirty_checkout):
    out = tmp_path / "r.json"
    result = invoke("run", *TINY, "--evidence", "formal", "--output", out)
    assert result.exit_code == 2
    assert result.output == (
        "Error: evidence: formal runs need a clean, identified checkout and image: the git "
        "tree has uncommitted changes (set ALLOW_UNVERIFIED_PROVENANCE=1 to run anyway, "
        "marked unverified)\n"
    )
    assert not out.exists()


@pytest.mark.slow
def test_allowed_unverified_runs_are_marked_and_exploratory_is_the_default(
    invoke, tmp_path, dirty_checkout, monkeypatch
):
    monkeypatch.setenv(provenance.ALLOW_UNVERIFIED_VARIABLE, "1")
    out = tmp_path / "r.json"
    assert invoke("run", *TINY, "--evidence", "formal", "--output", out).exit_code == 0
    doc = read_json(out)
    assert (doc["evidence"], doc["verified"]) == ("formal", False)
    assert doc["provenance"]["evidence_problems"] == ["the git tree has uncommitted changes"]
    assert invoke("run", *TINY, "--output", out, "--overwrite").exit_code == 0
    assert (read_json(out)["evidence"], read_json(out)["verified"]) == ("exploratory", None)


@pytest.mark.parametrize(
    ("reference", "repository"),
    [
        (
            "pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime@sha256:" + "a" * 64,
            "docker.io/pytorch/pytorch",
        ),
        ("nvcr.io/nvidia/pytorch:25.12-py3@sha256:" + "b" * 64, "nvcr.io/nvidia/pytorch"),
        ("ubuntu:24.04", "docker.io/library/ubuntu"),
        ("localhost:5000/team/pytorch:1", "localhost:5000/team/pytorch"),
        ("ghcr.io/someone/pytorch@sha256:" + "c" * 64, "ghcr.io/someone/pytorch"),
    ],
)
def test_image_references_name_their_registry_the_way_docker_does(reference, repository):
    assert provenance.repository(reference) == repository


def test_a_base_image_from_another_registry_is_a_problem_unless_declared():
    clean = {"revision": "a" * 40, "dirty": False}
    official = {"MTB_BASE_IMAGE": "pytorch/pytorch:2.13.0@sha256:" + "a" * 64}
    assert provenance.evidence_problems(clean, official) == []
    mirror = {"MTB_BASE_IMAGE": "registry.example/mirror/pytorch:2.13.0@sha256:" + "a" * 64}
    (problem,) = provenance.evidence_problems(clean, mirror)
    assert problem == (
        f"the image's base {mirror['MTB_BASE_IMAGE']} is not from a pinned official repository "
        "(docker.io/pytorch/pytorch, nvcr.io/nvidia/pytorch); declare its registry with "
        "--allow-registry registry.example"
    )
    assert provenance.evidence_problems(clean, mirror, ("registry.example",)) == []
    assert provenance.evidence_problems(clean, mirror, ("registry.example/mirror",)) == []
    assert provenance.evidence_problems(clean, mirror, ("registry.example/other",)) != []
    assert provenance.evidence_problems(clean, mirror, ("registry.ex",)) != []


def test_formal_evidence_refuses_an_undeclared_registry_in_one_line(invoke, tmp_path, monkeypatch):
    clean = {"revision": "a" * 40, "dirty": False, "root": "/src"}
    monkeypatch.setattr(provenance, "git_info", lambda start=None: clean)
    monkeypatch.delenv(provenance.ALLOW_UNVERIFIED_VARIABLE, raising=False)
    monkeypatch.setenv("MTB_BASE_IMAGE", "registry.example/pytorch@sha256:" + "a" * 64)
    out = tmp_path / "r.json"
    result = invoke("run", *TINY, "--evidence", "formal", "--output", out)
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "--allow-registry registry.example" in result.output
    assert not out.exists()
    declared = ["--allow-registry", "registry.example"]
    assert invoke("run", *TINY, "--evidence", "formal", *declared, "--output", out).exit_code == 0
    doc = read_json(out)
    assert (doc["verified"], doc["config"]["allow_registry"]) == (True, "registry.example")


def fake_smi(monkeypatch, used_mib: int):
    rows = {
        "--query-gpu=index,uuid,memory.used": [["0", "GPU-a", str(used_mib)]],
        "--query-compute-apps=gpu_uuid,pid,used_memory": [["GPU-a", "999999", str(used_mib)]],
    }
    monkeypatch.setattr(gpu_guard.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(gpu_guard, "nvidia_smi", lambda query: rows[query])
    monkeypatch.delenv(gpu_guard.ALLOW_VARIABLE, raising=False)
    monkeypatch.delenv(gpu_guard.RECORD_VARIABLE, raising=False)


def test_a_busy_gpu_is_refused_unless_allowed_and_the_override_is_recorded(monkeypatch):
    fake_smi(monkeypatch, 3 * 1024)
    with pytest.raises(UsageError, match=r"GPU 0 \(3.0 GiB\) already in use by other processes"):
        gpu_guard.check()
    monkeypatch.setenv(gpu_guard.ALLOW_VARIABLE, "1")
    gpu_guard.check()
    record = provenance.collect([])["gpu_guard"]
    assert record["allowed_busy"] and record["busy"][0]["foreign_bytes"] == 3 * 2**30
    fake_smi(monkeypatch, 512)
    gpu_guard.check()
    assert gpu_guard.recorded()["busy"] == []


class ExpertParallel(Strategy):
    """Test only: a strategy that splits experts over ep ranks and replicates the rest."""

    name = "test-ep"
    parallel_dims = ("ep",)
    trains_moe = True


class ExpertParallelPlugin:
    @hookimpl
    def mtb_register_strategies(self, register):
        register(ExpertParallel())


def test_estimates_split_the_experts_over_ep_ranks(invoke, pm):
    # tiny-moe: 59,232 parameters, 32,768 of them in the 4 experts of its one MoE layer
    pm.register(ExpertParallelPlugin(), name="expert-parallel")
    rows = estimate(invoke, "--preset", "tiny-moe", "--world-size", "2", "--ep", "2")
    split = rows["test-ep"]
    assert split["parameter_count"] == 59_232
    assert split["expert_parameters_per_rank"] == 16_384
    assert split["parameters"] == 4 * (59_232 - 32_768) + 4 * 16_384
    assert split["total"] == 16 * (59_232 - 32_768 + 16_384)
    assert rows["single"]["note"] == "runs on at most 1 process(es)"
    whole = estimate(invoke, "--preset", "tiny-moe", "--strategy", "single")["single"]
    assert whole["total"] == 16 * 59_232
    refused = invoke("estimate-memory", "--preset", "tiny-moe", "--world-size", "2", "--ep", "3")
    assert refused.exit_code == 2
    assert refused.output.strip() == (
        "Error: --ep: 3 must divide --world-size 2 and the 4 experts of preset 'tiny-moe'"
    )
