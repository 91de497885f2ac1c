"""The Slurm and Kubernetes templates: the fields mtb relies on, and a real run of the batch script.

The batch script runs for real with stand-ins for ``srun`` (one task per
node, concurrently, each with its own SLURM_NODEID) and ``scontrol``, so
what it hands ``mtb`` must rendezvous two agents into one world of two ranks.
"""

import json
import os
import re
import shlex
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from mtb.cli import make_cli
from mtb.plugins import build_plugin_manager

SBATCH = ROOT / "deploy" / "slurm" / "mtb-run.sbatch"
MANIFEST = ROOT / "deploy" / "kubernetes" / "mtb-run-job.yaml"
pytestmark = pytest.mark.timeout(300)


def run_options() -> set[str]:
    command = make_cli(build_plugin_manager()).commands["run"]
    return {opt for param in command.params for opt in [*param.opts, *param.secondary_opts]}


def test_the_batch_script_asks_one_task_per_node_and_passes_every_rendezvous_flag():
    text = SBATCH.read_text()
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", text, re.M))
    assert directives["ntasks-per-node"] == "1"  # one agent per node; it starts the ranks
    assert int(directives["nodes"]) >= 2
    for flag in (
        '--nnodes "$SLURM_NNODES"',
        '--node-rank "$SLURM_NODEID"',
        '--rdzv-id "$SLURM_JOB_ID"',
    ):
        assert flag in text
    assert subprocess.run(["bash", "-n", str(SBATCH)], check=False).returncode == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stand_in(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_the_batch_script_runs_two_nodes_into_one_result(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir, "scontrol", 'printf "127.0.0.1\\n127.0.0.1\\n"\n')
    # every node's task at once, as srun starts them, with its own SLURM_NODEID
    stand_in(
        bin_dir,
        "srun",
        'while [[ "$1" == --* ]]; do shift; done\n'
        'for node in $(seq 0 $((SLURM_NNODES - 1))); do SLURM_NODEID=$node "$@" & done\n'
        "status=0; for job in $(jobs -p); do wait $job || status=1; done; exit $status\n",
    )
    stand_in(bin_dir, "mtb", f'exec {shlex.quote(sys.executable)} -m mtb "$@"\n')
    result = tmp_path / "run.json"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "node[0-1]",
        "GPUS_PER_NODE": "1",
        "RDZV_PORT": str(free_port()),
        "PRESET": "tiny",
        "RESULT": str(result),
        "EXTRA_ARGS": "--steps 3 --warmup-steps 1 --device cpu --timeout 120",
        "DOCTOR": "0",
    }
    done = subprocess.run(
        ["bash", str(SBATCH)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(result.read_text())
    assert (doc["status"], doc["environment"]["world_size"]) == ("ok", 2)
    assert doc["config"]["launch"]["nnodes"] == 2
    assert doc["config"]["launch"]["rdzv_id"] == "4242"
    assert [node["node_rank"] for node in doc["provenance"]["nodes"]] == [0, 1]


def manifest() -> dict:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(MANIFEST.read_text())}


def args_of(container: dict) -> dict:
    return dict(arg.removeprefix("--").split("=", 1) for arg in container["args"])


def test_the_indexed_job_runs_one_agent_per_node_with_pod_0_as_the_endpoint():
    docs = manifest()
    job, service = docs["Job"], docs["Service"]
    spec = job["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    args = args_of(container)
    assert container["command"] == ["mtb", "run"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == int(args["nnodes"])
    assert args["node-rank"] == "$(JOB_COMPLETION_INDEX)"  # set by the Job controller
    host, port = args["rdzv-endpoint"].split(":")
    subdomain = spec["template"]["spec"]["subdomain"]
    assert host == f"{job['metadata']['name']}-0.{subdomain}"  # pod 0's stable DNS name
    assert service["metadata"]["name"] == subdomain and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": job["metadata"]["name"]}
    assert int(port) in [p["port"] for p in service["spec"]["ports"]]
    assert int(args["nproc-per-node"]) == container["resources"]["limits"]["nvidia.com/gpu"]
    assert spec["backoffLimit"] == 0 and spec["template"]["spec"]["restartPolicy"] == "Never"
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    (shm,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert volumes[shm["name"]]["emptyDir"]["medium"] == "Memory"


def test_every_flag_in_the_templates_is_an_mtb_run_option():
    options = run_options()
    (container,) = manifest()["Job"]["spec"]["template"]["spec"]["containers"]
    flags = {f"--{name}" for name in args_of(container)}
    flags |= set(re.findall(r"(--[a-z][\w-]*) [\\\"]*\$", SBATCH.read_text()))
    flags -= {"--ntasks-per-node", "--kill-on-bad-exit"}  # srun's own
    assert flags and flags <= options, flags - options
