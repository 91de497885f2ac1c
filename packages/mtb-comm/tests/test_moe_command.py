"""``mtb moe route`` on 2 gloo ranks: drops counted, dispatch and combine equal the reference."""

import pytest
from conftest import run_mtb


@pytest.fixture(scope="session")
def moe(session_dir):
    # 4 experts, 2 per rank; capacity ceil(0.5 x 32 / 4) = 4 per expert: drops are certain
    args = ["moe", "route", "--tokens", "32", "--capacity-factor", "0.5", "--iters", "3"]
    return run_mtb(session_dir, "moe", *args)


def test_moe_route(moe):
    done, doc = moe
    assert done.returncode == 0, done.stderr
    assert (doc["kind"], doc["status"]) == ("moe", "ok")
    m = doc["moe"]
    assert m["tokens"] == 64 and m["capacity_per_rank"] == 4
    assert sum(m["assigned_per_expert"]) == 64
    assert max(m["kept_per_expert"]) <= 2 * 4  # two ranks, capacity 4 each
    assert m["dropped"] == 64 - sum(m["kept_per_expert"]) > 0
    mean = sum(m["assigned_per_expert"]) / 4
    assert m["imbalance"] == pytest.approx(max(m["assigned_per_expert"]) / mean)
    assert m["load_balancing_loss"] >= 0.99
    assert m["dispatch_time_us"] > 0 and m["combine_time_us"] > 0
    assert m["wrong_elements"] == 0 and m["max_abs_error"] < 1e-5
    assert m["checked_elements"] == 64 * 32
