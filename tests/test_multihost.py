"""Two hosts on one machine: network namespaces joined by a veth pair, one mtb agent in each.

Each namespace has its own address and interface; they share the hostname,
which is why every agent passes ``--local-addr``. Needs root and iproute2
(``ip``); skipped with the reason otherwise. The namespaces are removed
afterwards, also when a test fails.
"""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.slow(reason="each starts mtb in two network namespaces that meet"),
]
TINY = ["--strategy", "ddp", "--preset", "tiny", "--steps", "4", "--warmup-steps", "1"]
TINY += ["--device", "cpu", "--peak-tflops", "1", "--timeout", "120"]  # the timeout last
PORT = 29517
SUBNET = "10.77.0"


def why_not() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    return None


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class Hosts:
    """Namespaces ``A`` and ``B`` at SUBNET.1 and SUBNET.2 over one veth pair."""

    def __init__(self):
        tag = f"mtb{os.getpid() % 100000}"
        self.names = {"A": f"{tag}a", "B": f"{tag}b"}
        self.links = {"A": f"{tag}va", "B": f"{tag}vb"}
        self.addresses = {"A": f"{SUBNET}.1", "B": f"{SUBNET}.2"}

    def create(self) -> None:
        for host in "AB":
            ip("netns", "add", self.names[host])
        ip("link", "add", self.links["A"], "type", "veth", "peer", "name", self.links["B"])
        for host in "AB":
            name, link = self.names[host], self.links[host]
            ip("link", "set", link, "netns", name)
            ip("-n", name, "addr", "add", f"{self.addresses[host]}/24", "dev", link)
            ip("-n", name, "link", "set", link, "up")
            ip("-n", name, "link", "set", "lo", "up")

    def remove(self) -> None:
        for name in self.names.values():  # deleting a namespace deletes its veth end
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)

    def command(self, host: str, args: list) -> list[str]:
        namespace = ["ip", "netns", "exec", self.names[host]]
        return [*namespace, sys.executable, "-m", "mtb", *map(str, args)]

    def env(self, host: str) -> dict:
        return {**os.environ, "GLOO_SOCKET_IFNAME": self.links[host], "OMP_NUM_THREADS": "1"}

    def node_args(self, host: str, endpoint: str | None = None) -> list:
        endpoint = endpoint or f"{self.addresses['A']}:{PORT}"
        rank = "AB".index(host)
        return ["--nnodes", 2, "--node-rank", rank, "--rdzv-endpoint", endpoint,
                "--local-addr", self.addresses[host]]  # fmt: skip

    def both(self, args: list, outputs: dict) -> dict:
        """Start an agent in each namespace; host -> finished process."""
        procs = {
            host: subprocess.Popen(
                self.command(host, [*args, *self.node_args(host), "--output", outputs[host]]),
                env=self.env(host),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for host in "AB"
        }
        finished = {}
        for host, proc in procs.items():
            try:
                out, err = proc.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                for other in procs.values():
                    other.kill()
                raise
            finished[host] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        return finished


@pytest.fixture(scope="module")
def hosts():
    reason = why_not()
    if reason:
        pytest.skip(reason)
    made = Hosts()
    made.remove()  # leftovers of an interrupted earlier run with the same pid
    try:
        made.create()
    except subprocess.CalledProcessError as error:
        made.remove()
        pytest.skip(f"cannot create network namespaces here: {error.stderr.strip()}")
    yield made
    made.remove()


def losses(path) -> list[float]:
    doc = json.loads(path.read_text())
    assert doc["status"] == "ok", doc["error"]
    return [step["loss"] for step in doc["trials"][0]["steps"]]


def test_two_hosts_write_one_result_equal_to_one_host_with_two_ranks(hosts, tmp_path):
    single = tmp_path / "single.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "mtb", "run", *TINY, "--nproc-per-node", 2, "--output", single]
    done = subprocess.run([*map(str, args)], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    outputs = {host: tmp_path / f"{host}.json" for host in "AB"}
    finished = hosts.both(["run", *TINY, "--nproc-per-node", 1], outputs)
    for host, proc in finished.items():
        assert proc.returncode == 0, f"{host}: {proc.stdout}{proc.stderr}"
    assert not outputs["B"].exists()  # global rank 0 alone writes
    doc = json.loads(outputs["A"].read_text())
    assert doc["environment"]["world_size"] == 2
    assert [n["node_rank"] for n in doc["provenance"]["nodes"]] == [0, 1]
    assert losses(outputs["A"]) == losses(single)


def test_doctor_connectivity_passes_between_the_hosts(hosts, tmp_path):
    outputs = {host: tmp_path / f"doctor-{host}.json" for host in "AB"}
    finished = hosts.both(["doctor", "--probe-mib", 1, "--timeout", 60], outputs)
    for host, proc in finished.items():
        assert proc.returncode == 0, f"{host}: {proc.stdout}{proc.stderr}"
    checks = {c["name"]: c for c in json.loads(outputs["A"].read_text())["checks"]}
    probe = checks["all_reduce"]
    assert probe["status"] == "ok", probe
    assert probe["details"]["world_size"] == 2 and probe["details"]["busbw_gbps"] > 0
    assert "GLOO_SOCKET_IFNAME" not in checks  # the namespace's own interface: no warning
    assert [n["node_rank"] for n in probe["details"]["nodes"]] == [0, 1]


def test_an_unreachable_endpoint_fails_within_the_timeout(hosts, tmp_path):
    out = tmp_path / "unreachable.json"
    nowhere = f"{SUBNET}.9:{PORT}"  # in the subnet, but no host has the address
    args = ["run", *TINY[:-1], 5, *hosts.node_args("B", nowhere), "--output", out]
    started = time.monotonic()
    done = subprocess.run(
        hosts.command("B", args), env=hosts.env("B"), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert time.monotonic() - started < 5 + 30  # the timeout and start-up, not minutes
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: launch.rdzv_endpoint: nothing answered at {nowhere} within 5 s")
    assert json.loads(out.read_text())["status"] == "failed"


def test_comm_across_the_hosts_writes_one_result_with_both_nodes(hosts, tmp_path):
    outputs = {host: tmp_path / f"comm-{host}.json" for host in "AB"}
    args = ["comm", "--operations", "all_reduce,all_to_all", "--sizes", "1K", "--iters", 2]
    finished = hosts.both([*args, "--warmup", 1, "--timeout", 120], outputs)
    for host, proc in finished.items():
        assert proc.returncode == 0, f"{host}: {proc.stdout}{proc.stderr}"
    assert not outputs["B"].exists()
    doc = json.loads(outputs["A"].read_text())
    assert (doc["status"], doc["environment"]["world_size"]) == ("ok", 2)
    assert [n["node_rank"] for n in doc["provenance"]["nodes"]] == [0, 1]
    assert all(m["wrong_elements"] == 0 for m in doc["measurements"])
