"""``mtb comm --operations send_recv`` on 3 gloo ranks: a ring, each rank holds its predecessor's.

Three ranks, because on two the next and the previous rank are the same one
and a ring sent the wrong way round would still pass.
"""

import pytest
from conftest import run_mtb

from mtb_comm.bandwidth import bus_factor


def test_send_recv_bus_factor_is_one_whatever_the_world():
    assert [bus_factor("send_recv", n) for n in (1, 2, 8, 64)] == [1.0] * 4


@pytest.mark.slow
def test_send_recv_is_a_checked_ring_with_busbw_equal_to_algbw(tmp_path):
    args = ["comm", "--operations", "send_recv", "--sizes", "1K,64K", "--iters", "3"]
    done, doc = run_mtb(tmp_path, "sendrecv", *args, "--warmup", "1", nproc=3)
    assert done.returncode == 0, done.stderr
    assert doc["status"] == "ok"
    rows = doc["measurements"]
    assert [(m["operation"], m["placement"], m["bytes"]) for m in rows] == [
        ("send_recv", "out_of_place", 1024),
        ("send_recv", "out_of_place", 65536),
    ]
    for m in rows:
        assert m["status"] == "ok" and m["wrong_elements"] == 0
        assert m["checked_elements"] == 3 * m["elements"]  # every rank's receive buffer
        assert m["busbw_gbps"] == pytest.approx(m["algbw_gbps"])


def test_send_recv_is_not_in_the_default_operations():
    from mtb_comm.config import CommConfig

    assert "send_recv" not in CommConfig().operations
