"""``mtb profile`` and ``mtb run --profiler torch``: traces, summaries, refusals, stragglers."""

import json

import pytest
from conftest import mtb_subprocess, read_json

from mtb.profiling import trace
from mtb.profiling.summary import combine

pytestmark = pytest.mark.timeout(300)

PROFILE = ["--preset", "tiny", "--steps", "5", "--warmup-steps", "1", "--profile-active", "2"]
TWO_RANKS = {
    "MTB_PLUGIN_MODULES": "mtb_test_allreduce,mtb_test_straggler",
    "MTB_LOAD_PLUGINS": "",
    "MTB_TEST_SLOW_RANK": "1",
    "MTB_TEST_SLOW_MS": "60",
}


@pytest.mark.slow
def test_single_rank_profile_writes_a_trace_summaries_and_a_profile_document(invoke, tmp_path):
    out = tmp_path / "p.json"
    done = invoke("profile", *PROFILE, "--output", out)
    assert done.exit_code == 0, done.output
    assert "mtb profile (torch): strategy single" in done.output
    doc = read_json(out)
    assert doc["kind"] == "profile" and doc["status"] == "ok"
    directory = tmp_path / "p-profile"
    names = sorted(p.name for p in directory.iterdir())
    assert names == ["profile_summary.json", "profile_summary.md", "rank_00000.trace.json.gz"]
    chrome = trace.load(directory / "rank_00000.trace.json.gz")
    spans = {e["name"] for e in trace.complete_events(chrome)}
    assert {"mtb.data", "mtb.forward", "mtb.backward", "mtb.optimizer"} <= spans
    assert {"mtb.micro_batch.0", "ProfilerStep#2", "ProfilerStep#3"} <= spans
    profile = doc["profile"]
    assert profile == json.loads((directory / "profile_summary.json").read_text())
    assert profile["profiled_steps"] == 2 and profile["traces"] == ["rank_00000.trace.json.gz"]
    assert profile["overlap"]["status"] == "undetermined"
    assert "no communication events" in profile["overlap"]["reason"]
    assert profile["overhead"]["status"] == "measured"
    assert profile["overhead"]["baseline_step_ms_p50"] > 0
    assert set(profile["per_rank"][0]["breakdown_ms"]) >= {"data", "forward", "backward"}
    assert doc["rows"][0]["rank"] == 0 and {"name", "total_ms", "count"} <= set(doc["rows"][0])
    assert len(doc["trials"]) == 1 and len(doc["trials"][0]["steps"]) == 4
    md = (directory / "profile_summary.md").read_text()
    assert "undetermined (the trace holds no communication events" in md
    assert "## Top operators by self CPU time" in md


@pytest.mark.slow
def test_run_with_profiler_torch_is_a_profiled_run(invoke, tmp_path):
    out = tmp_path / "r.json"
    done = invoke(
        "run",
        *PROFILE,
        "--profiler",
        "torch",
        "--no-profile-baseline",
        "--profile-dir",
        tmp_path / "traces",
        "--output",
        out,
    )
    assert done.exit_code == 0, done.output
    doc = read_json(out)
    assert doc["kind"] == "profile" and doc["config"]["profile"]["profiler"] == "torch"
    assert doc["profile"]["overhead"]["status"] == "not measured"
    assert (tmp_path / "traces" / "rank_00000.trace.json.gz").exists()


def test_profile_defaults_to_torch_and_run_to_no_profiler(invoke):
    assert 'profiler = "torch"' in invoke("profile", "--preset", "tiny", "--print-config").output
    assert "profiler =" not in invoke("run", "--preset", "tiny", "--print-config").output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--profile-active", "9"], "Error: profile.active_steps: profile.wait_steps + "),
        (["--repeat", "2"], "Error: training.repeat: must be 1 when profiling (--profiler)"),
        (["--profiler", "nope"], "Error: unknown profiler 'nope'; installed: torch"),
        (["--profile-wait", "-1"], "Error: profile.wait_steps: must be >= 0, got -1"),
    ],
)
def test_bad_profile_settings_are_one_line_usage_errors(invoke, args, message):
    done = invoke("profile", *PROFILE, *args)
    assert done.exit_code == 2
    assert done.output.strip().splitlines()[-1].startswith(message)


@pytest.fixture(scope="module")
def straggler_run(tmp_path_factory):
    """One 2-rank gloo profile in which rank 1 sleeps 60 ms after every step."""
    out = tmp_path_factory.mktemp("two") / "p.json"
    args = ["profile", "--strategy", "test-allreduce", *PROFILE, "--nproc-per-node", "2"]
    done = mtb_subprocess([*args, "--timeout", "200", "--output", out], env=TWO_RANKS)
    assert done.returncode == 0, done.stderr
    return read_json(out)


@pytest.mark.slow
def test_summary_of_a_real_two_rank_gloo_trace(straggler_run):
    profile = straggler_run["profile"]
    assert profile["traces"] == ["rank_00000.trace.json.gz", "rank_00001.trace.json.gz"]
    chromes = [trace.load(f"{profile['directory']}/{name}") for name in profile["traces"]]
    assert [c["distributedInfo"]["world_size"] for c in chromes] == [2, 2]
    assert profile["timeline"] == "cpu"
    comm = {op["name"]: op for op in profile["comm_ops"]}
    assert comm["gloo:all_reduce"]["count"] > 0 and comm["gloo:all_reduce"]["ranks"] == 2
    assert profile["overlap"]["status"] == "measured" and 0 <= profile["overlap"]["ratio"] <= 1
    assert all(ms > 0 for ms in profile["collective_ms_per_rank"])
    assert [row["rank"] for row in profile["per_rank"]] == [0, 1]
    # the summary is the trace's: recomputing it from the files gives the same numbers
    again = combine([trace.analyse(c, top=15) for c in chromes], top=15)
    assert again["per_rank"] == profile["per_rank"]
    assert again["overlap"] == profile["overlap"]


@pytest.mark.slow
def test_the_slowed_rank_is_named_the_straggler(straggler_run):
    straggler = straggler_run["profile"]["straggler"]
    assert straggler["status"] == "measured"
    assert straggler["slowest_rank"] == 1
    assert straggler["ratio"] > 1.2
    fast, slow = straggler_run["profile"]["per_rank"]
    assert fast["exposed_comm_ms"] > slow["exposed_comm_ms"]  # rank 0 waits for rank 1
