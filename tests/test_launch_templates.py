"""The Slurm and Kubernetes templates: the fields mtb relies on.

The Slurm batch script is what ``mtb slurm script`` prints, the form the
matrix executor submits; tests/test_slurm_runs.py runs that on a real
two-node Slurm cluster.
"""

import re
import subprocess
import sys

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


#: how deploy/slurm/mtb-run.sbatch was made; regenerate it with this command
TEMPLATE_COMMAND = (
    "slurm script --nodes 2 --nproc-per-node 8 --device cuda --cpus-per-task 32 "
    "--time 00:30:00 --python python -- --strategy ddp --preset small"
)


def test_the_batch_template_is_what_mtb_slurm_script_prints():
    """The executor's own script: what a user submits by hand is what the Slurm tests run."""
    printed = subprocess.run(
        [sys.executable, "-m", "mtb", *TEMPLATE_COMMAND.split()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert printed.stdout == SBATCH.read_text(), f"regenerate: mtb {TEMPLATE_COMMAND}"
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", printed.stdout, re.M))
    assert directives["ntasks-per-node"] == "1"  # one agent per node; it starts the ranks
    assert directives["gpus-per-node"] == "8"
    assert subprocess.run(["bash", "-n", str(SBATCH)], check=False).returncode == 0


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
    flags |= set(re.findall(r" (--[a-z][\w-]*) ", SBATCH.read_text().split("bash -c", 1)[1]))
    assert flags and flags <= options, flags - options
