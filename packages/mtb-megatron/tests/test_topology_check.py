"""megatron-core's parallel groups on 4 CPU ranks over gloo against mtb's layout (real code)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("megatron.core", reason="needs the [megatron-core] extra")


@pytest.mark.timeout(290)
def test_megatron_core_groups_match_the_layout_on_4_ranks(tmp_path):
    out = tmp_path / "topology.json"
    cmd = [sys.executable, "-m", "mtb", "megatron", "topology", "--world-size", "4"]
    cmd += ["--topologies", "1x1,2x1,1x2,2x2", "--timeout", "240", "--output", str(out)]
    done = subprocess.run(
        cmd, env={**os.environ, "PYTHONWARNINGS": "ignore"}, capture_output=True, text=True,
        timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert (doc["kind"], doc["mode"], doc["status"]) == ("megatron", "topology", "ok")
    assert doc["megatron_core"]["version"] == "0.16.1"
    rows = {row["topology"]: row for row in doc["checks"]}
    assert {name: (r["dp"], r["ranks_checked"], r["mismatches"]) for name, r in rows.items()} == {
        "1x1": (4, 4, 0),
        "2x1": (2, 4, 0),
        "1x2": (2, 4, 0),
        "2x2": (1, 4, 0),
    }
    rank3 = rows["2x2"]["ranks"][3]["megatron_core"]
    assert rank3 == {
        "tp_group": [2, 3], "pp_group": [1, 3], "dp_group": [3],
        "tp_rank": 1, "pp_rank": 1, "dp_rank": 0,
    }  # fmt: skip
    assert rows["1x2"]["ranks"][0]["megatron_core"]["dp_group"] == [0, 1]
    assert "2x2" in done.stdout and "mismatches" in done.stdout


def test_a_topology_that_does_not_fit_is_refused(cli):
    from click.testing import CliRunner

    result = CliRunner().invoke(
        cli, ["megatron", "topology", "--world-size", "4", "--topologies", "3x1"]
    )
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: topologies: 3x1 needs TP x PP = 3 to divide the world size 4"
    )
