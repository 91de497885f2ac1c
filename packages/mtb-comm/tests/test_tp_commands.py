"""``mtb tp check|mlp|sequence`` on 2 and 4 gloo ranks, and a wrong shard layout caught."""

import pytest
from conftest import run_mtb

from mtb_comm.tp_checks import EXPECTED_COLLECTIVES

RUNS = {
    "check-2": (["tp", "check"], 2),
    "mlp-2": (["tp", "mlp"], 2),
    "sequence-2": (["tp", "sequence"], 2),
    "sequence-4": (["tp", "sequence", "--seq-len", "8"], 4),
    "mlp-wrong-shard-2": (["tp", "mlp", "--dtypes", "float32", "--inject-wrong-shard"], 2),
}
TENSORS = {
    "column": {"out", "x", "fc1.weight", "fc1.bias"},
    "row": {"out", "x_wide", "fc2.weight", "fc2.bias"},
    "mlp": {"out", "x", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"},
    "sequence": {"out", "x", "norm.weight", "norm.bias", "fc1.weight", "fc1.bias"}
    | {"fc2.weight", "fc2.bias"},
}


@pytest.fixture(scope="session", params=sorted(RUNS))
def tp_run(request, session_dir):
    args, nproc = RUNS[request.param]
    return request.param, *run_mtb(session_dir, request.param, *args, nproc=nproc)


def test_tp_run(tp_run):
    name, done, doc = tp_run
    assert doc["kind"] == "tp" and doc["environment"]["world_size"] == int(name[-1])
    checks = {t["check"] for t in doc["tensors"]}
    for check in checks:
        for dtype in {t["dtype"] for t in doc["tensors"]}:
            names = {
                t["tensor"] for t in doc["tensors"] if (t["check"], t["dtype"]) == (check, dtype)
            }
            assert names == TENSORS[check]
            assert doc["collectives"][f"{check}/{dtype}"] == EXPECTED_COLLECTIVES[check]
    if "wrong-shard" in name:
        assert done.returncode == 1, done.stderr
        assert doc["status"] == "failed" and doc["error"].startswith("out of tolerance:")
        bad = {t["tensor"] for t in doc["tensors"] if not t["ok"]}
        # a consistent permutation of hidden units leaves the MLP output right: the
        # weight gradients, compared with the shards each rank should hold, are not
        assert {"fc1.weight", "fc1.bias", "fc2.weight"} <= bad and "out" not in bad
        assert "Error: out of tolerance" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    assert doc["status"] == "ok" and all(t["ok"] for t in doc["tensors"])
    for t in doc["tensors"]:
        limit = {"float32": 1e-5, "bfloat16": 2e-2}[t["dtype"]]
        assert t["tolerance"] == limit and t["max_rel_error"] <= limit
        if t["dtype"] == "float32":
            assert t["max_abs_error"] < 1e-4
    assert {"column", "row"} == checks if name.startswith("check") else len(checks) == 1
