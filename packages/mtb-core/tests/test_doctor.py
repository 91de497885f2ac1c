"""mtb doctor: risky variables, check arithmetic, the JSON shape, local and failing rendezvous."""

import socket
import time

import pytest
from conftest import mtb_subprocess, read_json

from mtb.doctor import check, variables
from mtb.doctor.connectivity import summarize

pytestmark = pytest.mark.timeout(180)
NAMES = ["eth0", "ib0", "lo"]


def statuses(environ: dict) -> dict:
    return {name: status for name, status, _ in variables.findings(environ, NAMES)}


def test_socket_ifname_naming_no_interface_warns_and_names_the_choices():
    ((name, status, message),) = variables.findings({"GLOO_SOCKET_IFNAME": "eth9"}, NAMES)
    assert (name, status) == ("GLOO_SOCKET_IFNAME", check.WARN)
    assert "GLOO_SOCKET_IFNAME=eth9 names no interface" in message and "eth0, ib0, lo" in message


def test_nccl_reads_interface_entries_as_prefixes_gloo_as_names():
    assert statuses({"NCCL_SOCKET_IFNAME": "eth"}) == {}  # a prefix of eth0
    assert statuses({"NCCL_SOCKET_IFNAME": "=eth"}) == {"NCCL_SOCKET_IFNAME": check.WARN}
    assert statuses({"NCCL_SOCKET_IFNAME": "^docker,lo"}) == {}  # exclusions select the rest
    assert statuses({"NCCL_SOCKET_IFNAME": "bond,ib"}) == {}
    assert statuses({"GLOO_SOCKET_IFNAME": "eth"}) == {"GLOO_SOCKET_IFNAME": check.WARN}


def test_debug_switches_renamed_variables_and_bad_master_values():
    found = statuses(
        {
            "NCCL_P2P_DISABLE": "1",
            "NCCL_BLOCKING_WAIT": "1",
            "NCCL_DEBUG": "trace",
            "MASTER_PORT": "99999",
            "MASTER_ADDR": "no-such-host.invalid",
            "NCCL_IB_DISABLE": "0",
        }
    )
    assert found == {
        "NCCL_P2P_DISABLE": check.WARN,
        "NCCL_BLOCKING_WAIT": check.WARN,
        "NCCL_DEBUG": check.WARN,
        "MASTER_PORT": check.FAIL,
        "MASTER_ADDR": check.FAIL,
    }


def test_worst_status_ignores_skipped_checks():
    def of(*states):
        return [check.Check(name="c", area="a", status=s, message="") for s in states]

    assert check.worst(of(check.OK, check.SKIPPED)) == check.OK
    assert check.worst(of(check.OK, check.WARN, check.SKIPPED)) == check.WARN
    assert check.worst(of(check.WARN, check.FAIL)) == check.FAIL


def test_bandwidth_is_the_slowest_rank_with_the_all_reduce_bus_factor():
    ranks = [
        {"rank": 0, "hostname": "a", "sum_ok": True, "small_us": 10.0, "probe_s": 0.5},
        {"rank": 1, "hostname": "b", "sum_ok": True, "small_us": 30.0, "probe_s": 1.0},
    ]
    gathered = {"world_size": 2, "backend": "gloo", "ranks": ranks}
    result = summarize(gathered, probe_bytes=2_000_000_000, elapsed_s=3.0)
    assert result.status == check.OK
    assert result.details["busbw_gbps"] == pytest.approx(2.0 * 2 * 1 / 2)  # 2 GB/s x 2(n-1)/n
    assert result.details["small_latency_us"] == 30.0
    assert result.details["hosts"] == ["a", "b"]
    ranks[1]["sum_ok"] = False
    assert summarize(gathered, 2_000_000_000, 3.0).status == check.FAIL


@pytest.mark.slow
def test_doctor_json_shape_and_no_gpu_is_skipped_not_failed(tmp_path):
    out = tmp_path / "doctor.json"
    env = {"GLOO_SOCKET_IFNAME": "nope0", "MASTER_PORT": "29500"}
    done = mtb_subprocess(["doctor", "--skip-connectivity", "--output", out], env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = read_json(out)
    assert (doc["kind"], doc["status"], doc["error"]) == ("doctor", "ok", None)
    assert doc["verdict"] in ("ok", "warn")
    checks = {c["name"]: c for c in doc["checks"]}
    for name in ("versions", "distributed", "cpu", "memory", "shm", "ulimits", "interfaces"):
        assert checks[name]["status"] in ("ok", "warn"), checks[name]
    assert checks["gpus"]["status"] == "skipped"
    assert checks["all_reduce"]["status"] == "skipped"
    assert checks["matmul_peak"]["details"]["flops"] > 0
    assert checks["GLOO_SOCKET_IFNAME"]["status"] == "warn"
    assert "nope0" in checks["GLOO_SOCKET_IFNAME"]["message"]
    assert checks["variables"]["details"]["set"]["MASTER_PORT"] == "29500"
    assert set(checks["interfaces"]["details"]["interfaces"]) >= {"lo"}
    assert sum(doc["counts"].values()) == len(doc["checks"])
    assert {"git", "torch", "hostname"} <= doc["provenance"].keys()
    assert "GLOO_SOCKET_IFNAME" in done.stdout


@pytest.mark.slow
def test_a_failing_check_exits_1(tmp_path):
    out = tmp_path / "doctor.json"
    env = {"MASTER_PORT": "not-a-port"}
    done = mtb_subprocess(["doctor", "--skip-connectivity", "--output", out], env=env)
    assert done.returncode == 1
    doc = read_json(out)
    assert doc["status"] == "failed" and doc["verdict"] == "fail"
    assert doc["error"].startswith("MASTER_PORT: MASTER_PORT=not-a-port is not a port number")


@pytest.mark.slow
def test_two_local_ranks_pass_the_all_reduce_and_measure_bandwidth(tmp_path):
    out = tmp_path / "doctor.json"
    args = ["doctor", "--nproc-per-node", 2, "--probe-mib", 1, "--output", out]
    done = mtb_subprocess(args)
    assert done.returncode == 0, done.stdout + done.stderr
    (probe,) = [c for c in read_json(out)["checks"] if c["name"] == "all_reduce"]
    assert probe["status"] == "ok", probe
    assert probe["details"]["world_size"] == 2
    assert probe["details"]["busbw_gbps"] > 0
    assert [r["sum_ok"] for r in probe["details"]["ranks"]] == [True, True]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_an_unreachable_endpoint_fails_within_the_timeout_naming_it(tmp_path):
    endpoint = f"127.0.0.1:{free_port()}"
    out = tmp_path / "doctor.json"
    args = ["doctor", "--nnodes", 2, "--node-rank", 1, "--rdzv-endpoint", endpoint]
    started = time.monotonic()
    done = mtb_subprocess([*args, "--timeout", 3, "--output", out])
    assert time.monotonic() - started < 3 + 30  # the timeout plus start-up, not a minute
    assert done.returncode == 1
    (probe,) = [c for c in read_json(out)["checks"] if c["area"] == "connectivity"]
    assert probe["status"] == "fail"
    assert f"nothing answered at {endpoint} within 3 s" in probe["message"]


@pytest.mark.slow
def test_a_malformed_endpoint_is_a_usage_error(tmp_path):
    done = mtb_subprocess(["doctor", "--rdzv-endpoint", "host-without-port"])
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "Error: launch.rdzv_endpoint: 'host-without-port' is not HOST:PORT (port 1-65535)"
    )


def test_master_addr_and_port_are_the_endpoint_unless_one_is_given():
    from mtb.cli.doctor_command import _launch

    environ = {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29400"}
    assert _launch({}, environ).rdzv_endpoint == "10.1.2.3:29400"
    assert _launch({"launch__rdzv_endpoint": "h:1"}, environ).rdzv_endpoint == "h:1"
    assert _launch({}, {"MASTER_ADDR": "10.1.2.3"}).rdzv_endpoint == ""
    assert _launch({}, {}).timeout_s == 60.0
