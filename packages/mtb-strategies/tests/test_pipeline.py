"""Pipeline parallel (strategy nd, pp 2) on 2 ranks over gloo, held to `single`.

Four blocks (so interleaving can put two stages on each rank), 4 sequences a
step, clipping on: the reference takes them in one batch, each pipeline in
its schedule's micro-batches. One launch per layout serves every assertion
about it; the 1f1b one is also the uninterrupted run of the resume test.
"""

import json
import subprocess
import sys

import pytest
from conftest import PIPELINE_MODEL, assert_same_training, launch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MODEL = [*PIPELINE_MODEL, "--micro-batch-size", "4"]
LAYOUTS = {
    "gpipe": ["--pp-schedule", "gpipe"],
    "1f1b": ["--pp-schedule", "1f1b", "--pp-microbatches", "4"],
    "interleaved": ["--pp-schedule", "interleaved-1f1b", "--pp-stages-per-rank", "2"],
}
#: (p - 1) / (v m + p - 1) for p = 2 ranks
THEORETICAL = {"gpipe": 1 / 3, "1f1b": 1 / 5, "interleaved": 1 / 9}


#: every layout's run saves and records digests: the 1f1b one is also the uninterrupted run
#: that the resume test compares with and resumes from
SAVING = ["--save-every", 2, "--record-digests"]


def run_pp(tmp, *args, name="run"):
    return launch("nd", tmp, "--pp", 2, *MODEL, *args, name=name)


@pytest.fixture(scope="module")
def pipeline_runs(tmp_path_factory):
    """(result, state, checkpoint folder) of a layout's 5-step run, launched on first use."""
    cache = {}

    def get(name):
        if name not in cache:
            tmp = tmp_path_factory.mktemp(f"pp-{name}")
            saving = [*SAVING, "--checkpoint-dir", tmp / "ckpt"]
            done, result, state = run_pp(tmp, *LAYOUTS[name], *saving)
            assert done.returncode == 0, done.stderr
            cache[name] = result, state, tmp / "ckpt"
        return cache[name]

    return get


@pytest.fixture(params=sorted(LAYOUTS))
def pipelined(request, pipeline_runs):
    result, state, _ = pipeline_runs(request.param)
    return request.param, result, state


def test_every_schedule_trains_exactly_like_single(pipelined, reference_pipeline):
    _, result, state = pipelined
    assert result["environment"]["layout"]["label"] == "pp2"
    assert [s["clipped"] for s in result["trials"][0]["steps"]] == [True] * 5
    assert_same_training(result, state, reference_pipeline)
    norms = [s["grad_norm"] for s in result["trials"][0]["steps"]]
    ref_norms = [s["grad_norm"] for s in reference_pipeline[0]["trials"][0]["steps"]]
    assert norms == pytest.approx(ref_norms, rel=1e-5)


def test_each_stage_reports_its_bubble_next_to_the_theoretical_one(pipelined):
    name, result, _ = pipelined
    ranks = [r["engine_metrics"]["pipeline"] for r in result["trials"][0]["per_rank"]]
    looped = name == "interleaved"
    assert [r["stages"] for r in ranks] == ([[0, 2], [1, 3]] if looped else [[0], [1]])
    for rank in ranks:
        assert rank["bubble_theoretical"] == pytest.approx(THEORETICAL[name])
        assert 0.0 < rank["bubble_measured"] < 1.0
        assert 0.0 < rank["compute_ms"] < rank["stage_step_ms"]
    details = result["strategy_details"]["pipeline"]
    assert details["stages"] == (4 if looped else 2)


@pytest.mark.timeout(600)
def test_nan_on_the_first_stage_stops_every_stage(tmp_path):
    done, result, _ = run_pp(tmp_path, "--inject-nan-at-step", 2, "--inject-nan-rank", 0)
    assert done.returncode == 1
    message = "non-finite loss on rank(s) 0, 1 at step 2; no optimizer step was taken"
    assert {f"mtb: rank 0: {message}", f"mtb: rank 1: {message}"} <= set(done.stderr.splitlines())
    assert result["status"] == "failed"


@pytest.mark.timeout(900)
def test_resume_is_exact_and_moved_stage_boundaries_are_refused(pipeline_runs, tmp_path):
    whole, _, whole_dir = pipeline_runs("1f1b")
    split = [*LAYOUTS["1f1b"], *SAVING, "--checkpoint-dir", tmp_path / "b"]
    done, _, _ = run_pp(tmp_path, "--steps", 2, *split, name="first")
    assert done.returncode == 0, done.stderr
    done, resumed, _ = run_pp(tmp_path, *split, "--resume", "latest", name="second")
    assert done.returncode == 0, done.stderr
    assert resumed["state_digests"] == whole["state_digests"]
    assert resumed["checkpoint"]["resumed"]["step"] == 2
    moved = ["--pp-schedule", "interleaved-1f1b", "--pp-stages-per-rank", 2, "--steps", 6]
    done, _, _ = run_pp(tmp_path, *moved, "--resume", whole_dir / "step_00000004", name="x")
    assert done.returncode == 2
    line = "layout: checkpoint pp2, run pp2 (pipeline stages 2 vs 4: stage boundaries moved)"
    assert line in done.stderr
    assert len([x for x in done.stderr.splitlines() if "stage boundaries" in x]) == 1


@pytest.mark.timeout(600)
def test_profile_of_a_pipeline_records_one_forward_backward_range_per_step(tmp_path):
    out = tmp_path / "p.json"
    args = ["profile", "--strategy", "nd", "--pp", 2, *MODEL, "--preset", "tiny", "--steps", 4]
    args += ["--warmup-steps", 1, "--profile-active", 2, "--nproc-per-node", 2, "--output", out]
    done = subprocess.run(
        [sys.executable, "-m", "mtb", *map(str, args)], capture_output=True, text=True, timeout=500
    )
    assert done.returncode == 0, done.stderr
    profile = json.loads(out.read_text())["profile"]
    assert profile["traces"] == ["rank_00000.trace.json.gz", "rank_00001.trace.json.gz"]
    for rank in profile["per_rank"]:
        assert rank["breakdown_ms"]["forward_backward"] > 0
        assert "forward" not in rank["breakdown_ms"]
