"""The profile file: TOML round trip, one-line load errors, missing figures, precision."""

from pathlib import Path

import attrs
import pytest

from mtb.api import UsageError
from mtb_plan import profile as prof

H200 = Path(prof.__file__).parent / "profiles" / "h200-nvlink-ib.toml"


def small_profile(**changes) -> prof.Profile:
    compute = prof.Compute(
        ranks_per_node=2,
        threads_per_rank=1,
        matmul_flops_per_s=3e10,
        matmul_backward_flops_per_s=2.5e10,
        elementwise_bytes_per_s=2e9,
        op_overhead_s=5e-6,
        optimizer_bytes_per_s=4e9,
        how="timed",
    )
    curve = prof.Curve(
        collective="all_reduce", group_size=2, latency_s=2e-4, bus_bandwidth_bytes_per_s=1e9
    )
    fields = dict(
        name="box-cpu",
        device="cpu",
        precision="fp32",
        devices_per_node=2,
        memory_bytes=8 * 2**30,
        memory_scope="node",
        runtime_bytes=300 * 2**20,
        compute=(compute,),
        comm=(curve,),
    )
    return prof.Profile(**{**fields, **changes})


def test_a_profile_survives_toml(tmp_path):
    original = small_profile()
    path = tmp_path / "p.toml"
    path.write_text(prof.to_toml(original))
    loaded = prof.load(path)
    assert loaded == original and loaded.path == str(path)
    assert loaded.compute[0].attention_flops_per_s is None  # left out of the file: no null


def test_memory_per_rank_divides_a_node_s_memory_but_not_a_device_s():
    assert small_profile().memory_per_rank(2) == 4 * 2**30
    assert small_profile(memory_scope="device").memory_per_rank(8) == 8 * 2**30


def one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda good: "[profile\nname=", "is not TOML"),
        (lambda good: good.replace("[profile]\n", '[profile]\ncolour = "red"\n'), "colour"),
        (lambda good: good.replace('"all_reduce"', '"gossip"'), "gossip"),
    ],
)
def test_a_bad_file_is_one_line_naming_it(tmp_path, edit, expected):
    path = tmp_path / "bad.toml"
    path.write_text(edit(prof.to_toml(small_profile())))
    with pytest.raises(UsageError) as error:
        prof.load(path)
    message = one_line(error)
    assert message.startswith(f"--profile: {path}") and expected in message, message


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(UsageError) as error:
        prof.load(tmp_path / "none.toml")
    assert one_line(error).startswith(f"--profile: cannot read {tmp_path / 'none.toml'}")


def test_a_missing_figure_names_the_calibrate_command_that_measures_it(tmp_path):
    profile = attrs.evolve(small_profile(), path=str(tmp_path / "p.toml"))
    with pytest.raises(UsageError) as error:
        profile.compute_for(4)
    assert one_line(error) == (
        "profile 'box-cpu': no compute figures at 4 rank(s) per node; measure them with "
        f"`mtb plan calibrate --device cpu --precision fp32 --nproc-per-node 2,4 --output "
        f"{tmp_path / 'p.toml'}`"
    )
    with pytest.raises(UsageError) as error:
        profile.curve("all_gather", 2, "node")
    message = one_line(error)
    assert "no all_gather curve for 2 ranks (within a node)" in message
    assert "`mtb plan calibrate --device cpu --precision fp32 --nproc-per-node 2" in message


def test_another_precision_is_one_line_naming_the_command():
    with pytest.raises(UsageError) as error:
        small_profile().check_precision("bf16")
    assert one_line(error) == (
        "profile 'box-cpu' was measured at fp32, the workload trains in bf16; measure one "
        "with `mtb plan calibrate --precision bf16`"
    )


def test_the_h200_profile_loads_and_nothing_in_it_was_measured():
    profile = prof.load(H200)
    assert (profile.device, profile.precision, profile.devices_per_node) == ("cuda", "bf16", 8)
    assert profile.memory_per_rank(8) == 141 * 10**9
    assert not profile.measured
    assert [c.ranks_per_node for c in profile.compute] == [8]
    assert not any(c.measured for c in profile.compute)
    assert not any(c.measured for c in profile.comm)
    expected = {(op, n, "node") for op in prof.COLLECTIVES[:5] for n in (2, 4, 8)}
    expected |= {(op, n, "cluster") for op in prof.COLLECTIVES[:5] for n in (2, 4, 8, 16, 32, 64)}
    assert {(c.collective, c.group_size, c.scope) for c in profile.comm} == expected
    # NVLink within a node is far faster than InfiniBand across nodes
    inside = profile.curve("all_reduce", 8, "node").bus_bandwidth_bytes_per_s
    across = profile.curve("all_reduce", 16, "cluster").bus_bandwidth_bytes_per_s
    assert inside > 5 * across
    assert all(c.how and 1e-6 < c.latency_s < 1e-4 for c in profile.comm)
