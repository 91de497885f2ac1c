"""The harness benchmark's arithmetic (interleaved steps split into the two sides), and
the table benches' provenance."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from harness_distributed import interleaved_intervals

pytestmark = pytest.mark.timeout(30)


def test_interleaved_steps_split_into_bare_steps_and_the_gaps_between_them():
    """mtb's step k is the gap between bare steps k-1 and k; warmup steps of both are left out."""
    # bare steps last 1 s each; mtb's steps (the gaps) 2, 3 and 4 s
    stamps = [(10.0, 11.0), (13.0, 14.0), (17.0, 18.0), (22.0, 23.0)]
    bare, mtb = interleaved_intervals(stamps, warmup=2)
    assert bare == [1000.0, 1000.0]
    assert mtb == [3000.0, 4000.0]
    assert len(interleaved_intervals(stamps, warmup=1)[1]) == 3
    with pytest.raises(ValueError, match="warmup"):
        interleaved_intervals(stamps, warmup=0)


def test_a_failed_launch_is_named_by_the_ranks_exception_not_torchruns_rule():
    """torchrun's report ends with a rule and its own ChildFailedError; the reason is the
    rank's exception (or, without one, the exit code)."""
    from types import SimpleNamespace

    from harness_distributed import _cause

    stderr = (
        'Traceback (most recent call last):\n    raise ValueError("boom")\nValueError: boom\n'
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "====\n  exitcode  : 1 (pid: 7)\n====\n"
    )
    assert _cause(SimpleNamespace(stderr=stderr)) == "ValueError: boom"
    killed = "====\n  exitcode  : -9 (pid: 7)\n====\n"
    assert _cause(SimpleNamespace(stderr=killed)) == "exitcode  : -9 (pid: 7)"
    assert _cause(SimpleNamespace(stderr="")) == "no output"


def test_a_table_bench_records_the_checkout_it_started_from(tmp_path):
    """A bench that refreshes committed results changes the checkout before it writes its
    document: the document keeps the provenance taken at the start, with the end time added."""
    import json
    from types import SimpleNamespace

    from harness import start_provenance, write_table_document

    begun = start_provenance()
    assert "start_utc" in begun and "end_utc" not in begun
    begun = {**begun, "git": {"revision": "f" * 40, "dirty": False, "root": str(tmp_path)}}
    args = SimpleNamespace(output=str(tmp_path / "bench.json"))
    write_table_document("bench-test", args, [{"row": 1}], [], begun)
    provenance = json.loads((tmp_path / "bench.json").read_text())["provenance"]
    assert provenance["git"] == begun["git"]  # not collected again at the end
    assert provenance["start_utc"] == begun["start_utc"] <= provenance["end_utc"]
