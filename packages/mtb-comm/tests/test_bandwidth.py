"""nccl-tests arithmetic against hand-computed values, and size parsing."""

from pathlib import Path

import pytest

from mtb.errors import ConfigError
from mtb_comm.bandwidth import algbw_gbps, bus_factor, busbw_gbps, element_count, size_notices
from mtb_comm.config import parse_list, parse_size, parse_sizes

# 1 GB (10^9 bytes) in 1e6 us (one second): algbw is exactly 1 GB/s
HAND = [
    # operation, world, busbw for 1 GB/s algbw
    ("all_reduce", 2, 1.0),  # 2 * 1 / 2
    ("all_reduce", 4, 1.5),  # 2 * 3 / 4
    ("all_reduce", 8, 1.75),  # 2 * 7 / 8
    ("all_gather", 2, 0.5),
    ("all_gather", 4, 0.75),
    ("reduce_scatter", 2, 0.5),
    ("reduce_scatter", 4, 0.75),
    ("all_to_all", 2, 0.5),
    ("all_to_all", 8, 0.875),
    ("broadcast", 2, 1.0),
    ("broadcast", 8, 1.0),
]


@pytest.mark.parametrize(("operation", "world", "busbw"), HAND)
def test_busbw_factors(operation, world, busbw):
    assert algbw_gbps(10**9, 1e6) == pytest.approx(1.0)
    assert busbw_gbps(operation, 10**9, 1e6, world) == pytest.approx(busbw)
    assert bus_factor(operation, world) == pytest.approx(busbw)


def test_algbw_of_16_mib_in_2_ms():
    # 16 MiB = 16,777,216 bytes in 2,000 us: 8.388608 GB/s; all_reduce on 4 ranks x 1.5
    assert algbw_gbps(16 * 2**20, 2000.0) == pytest.approx(8.388608)
    assert busbw_gbps("all_reduce", 16 * 2**20, 2000.0, 4) == pytest.approx(12.582912)
    assert busbw_gbps("all_to_all", 16 * 2**20, 2000.0, 4) == pytest.approx(6.291456)


def test_element_counts_round_split_operations_down_to_the_world_size():
    assert element_count("all_reduce", 1024, 4, 3) == 256
    assert element_count("all_gather", 1024, 4, 3) == 255
    assert element_count("reduce_scatter", 1024, 2, 3) == 510
    assert element_count("all_to_all", 10, 4, 4) == 4  # at least one element per rank
    assert element_count("broadcast", 1, 4, 2) == 1


def test_a_size_measured_at_other_bytes_gets_one_line_naming_both():
    operations = ["all_reduce", "all_gather", "broadcast"]
    (line,) = size_notices(operations, [3, 1024], "float32", 4, 2)
    assert line == (
        "mtb comm: size 3 B is measured as 4 B for all_reduce, broadcast and as 8 B for "
        "all_gather (whole float32 elements, at least one per rank, a multiple of 2 ranks "
        "where the operation splits the buffer)"
    )
    assert size_notices(["all_gather"], [1024], "float32", 4, 3) == [
        "mtb comm: size 1024 B is measured as 1020 B for all_gather (whole float32 elements, "
        "at least one per rank, a multiple of 3 ranks where the operation splits the buffer)"
    ]


def nccl_tests_split_count(size_bytes: int, itemsize: int, nranks: int) -> int:
    """nccl-tests' all_gather/reduce_scatter/alltoall element count (src/*.cu GetCollByteCount)."""
    per_rank = (size_bytes // itemsize // nranks) & ~(16 // itemsize - 1)
    return per_rank * nranks


def test_comm_md_states_the_rounding_difference_from_nccl_tests():
    docs = (Path(__file__).parents[3] / "docs" / "comm.md").read_text()
    ours, theirs = element_count("all_gather", 1000, 4, 3), nccl_tests_split_count(1000, 4, 3)
    assert (ours, theirs) == (249, 240)
    assert f"nccl-tests' all_gather moves {theirs} elements, mtb's {ours}" in docs
    assert "`time_us` = the max (nccl-tests' `-a 3`)" in docs


def test_sizes_are_powers_of_1024():
    assert parse_sizes("1K,1M,16M,1G,100") == [1024, 2**20, 16 * 2**20, 2**30, 100]
    assert parse_size("64mb") == 64 * 2**20


@pytest.mark.parametrize("text", ["1X", "K", "0", "-1K", "1.5M"])
def test_bad_sizes_name_the_field(text):
    with pytest.raises(ConfigError, match=r"^sizes: "):
        parse_sizes(text)


def test_operation_lists_are_checked_and_deduplicated():
    assert parse_list("ops", "b,a,b", ("a", "b")) == ["b", "a"]
    with pytest.raises(ConfigError, match="ops: 'c' is not one of: a, b"):
        parse_list("ops", "a,c", ("a", "b"))
