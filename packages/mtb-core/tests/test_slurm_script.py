"""The Slurm batch script and settings, without a cluster: what each job asks Slurm for.

The scripts run for real on a two-node Slurm cluster in tests/test_slurm_*.py.
"""

import shlex
import subprocess
import sys

import pytest

from mtb.config import ConfigError
from mtb.matrix import spec as spec_mod
from mtb.matrix.cells import expand
from mtb.preemption import PREEMPTION_EXIT
from mtb.slurm import scheduler, script, settings

pytestmark = pytest.mark.timeout(60)


def job(**changes) -> script.Job:
    fields = {
        "name": "mtb.m.cell",
        "command": ("run",),
        "argv": ("--strategy", "ddp", "--nnodes", "2"),
        "nodes": 2,
        "nproc_per_node": 4,
        "device": "cpu",
        "timeout_s": 600.0,
        "settings": settings.SlurmSettings(python="python3"),
        "result": "cells/cell.json",
        "log_stem": "cell",
        "chdir": "/shared/out",
    }
    return script.Job(**{**fields, **changes})


def directives(text: str) -> list[str]:
    return [
        line.removeprefix("#SBATCH ") for line in text.splitlines() if line.startswith("#SBATCH")
    ]


def test_a_cpu_job_asks_one_task_per_node_and_no_gpus():
    text = script.render(job())
    asked = directives(text)
    assert "--nodes=2" in asked and "--ntasks-per-node=1" in asked
    assert not any(d.startswith("--gpus-per-node") for d in asked)
    assert "--time=12" in asked  # 600 s and the 120 s margin, in whole minutes
    assert "--no-requeue" in asked and not any(d.startswith("--signal") for d in asked)
    assert "--chdir=/shared/out" in asked and "--output=logs/cell.slurm.out" in asked
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0


def test_each_node_starts_one_agent_that_meets_the_others_on_the_first_node():
    text = script.render(job())
    srun = text[text.index("srun ") :]
    assert "--output=logs/cell.node%n.log" in srun
    inner = shlex.split(srun.split("bash -c ", 1)[1].splitlines()[0])[0]
    for flag in ('--node-rank "$SLURM_NODEID"', '--rdzv-endpoint "$MTB_RDZV_ENDPOINT"'):
        assert flag in inner
    assert inner.startswith("exec python3 -m mtb run --strategy ddp")
    assert '--output "running/cell.json"' in inner
    assert 'mv -f "running/cell.json" "cells/cell.json"' in text


def test_one_node_needs_no_rendezvous_flags():
    text = script.render(job(nodes=1, argv=("--strategy", "single")))
    assert "--node-rank" not in text and "--rdzv-endpoint" not in text


def test_cuda_jobs_ask_their_gpus_and_an_explicit_count_wins():
    assert "--gpus-per-node=4" in directives(script.render(job(device="cuda")))
    explicit = settings.SlurmSettings(gpus_per_node=8, python="python3")
    assert "--gpus-per-node=8" in directives(script.render(job(settings=explicit)))
    none = settings.SlurmSettings(gpus_per_node=0, python="python3")
    assert not any(
        "gpus" in d for d in directives(script.render(job(device="cuda", settings=none)))
    )


def test_the_settings_become_directives_and_extra_arguments_follow():
    chosen = settings.SlurmSettings(
        partition="gpu",
        account="proj",
        qos="high",
        constraint="h100&ib",
        time="01:30:00",
        cpus_per_task=16,
        sbatch_args="--exclusive --mem=0",
        setup="source /opt/venv/bin/activate",
        python="python3",
    )
    text = script.render(job(settings=chosen))
    asked = directives(text)
    for expected in (
        "--partition=gpu",
        "--account=proj",
        "--qos=high",
        "--constraint='h100&ib'",
        "--time=01:30:00",
        "--cpus-per-task=16",
        "--exclusive",
        "--mem=0",
    ):
        assert expected in asked
    assert "source /opt/venv/bin/activate" in text.splitlines()


def test_with_checkpoints_the_job_saves_on_the_warning_signal_and_requeues_itself():
    text = script.render(job(checkpoints=True))
    asked = directives(text)
    assert "--requeue" in asked and "--signal=USR1@120" in asked
    assert "--resume latest" in text and "--save-on-signal" in text
    assert f"if [ $status -eq {PREEMPTION_EXIT} ]" in text and PREEMPTION_EXIT == 138
    assert "--kill-on-bad-exit" not in text  # a node leaving first must not kill the others
    assert 'scontrol requeue "$SLURM_JOB_ID"' in text


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"time": "soon"}, "slurm.time: 'soon' is not a Slurm time"),
        ({"partition": "a b"}, "slurm.partition: 'a b' must be one word"),
        ({"cpus_per_task": 0}, "slurm.cpus_per_task"),
        ({"nodes": 2}, "slurm.nodes"),
        ({"sbatch_args": "--comment='open"}, "slurm.sbatch_args: not valid shell words"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(table, message):
    with pytest.raises(ConfigError) as raised:
        settings.from_table(table)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_result_path_the_script_cannot_quote_is_refused():
    with pytest.raises(Exception, match="--output"):
        job(result='cells/"x".json')


def test_cell_slurm_keys_set_that_cell_and_are_not_flags_of_its_command():
    spec = spec_mod.from_dict(
        {
            "name": "m",
            "executor": "slurm",
            "slurm": {"partition": "cpu", "time": "10"},
            "options": {"strategy": "ddp"},
            "axes": {"slurm_partition": ["cpu", "big"]},
        },
        "m.toml",
    )
    cells = expand(spec)
    assert [c.argv() for c in cells] == [["--strategy", "ddp"]] * 2
    defaults = settings.from_table(spec.slurm)
    chosen = [settings.for_cell(defaults, c.options) for c in cells]
    assert [(s.partition, s.time) for s in chosen] == [("cpu", "10"), ("big", "10")]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"name": "m", "executor": "k8s"}, "executor"),
        ({"name": "m", "slurm": {"time": "x"}}, "slurm.time"),
        ({"name": "m", "slurm": "gpu"}, "slurm: must be a table"),
    ],
)
def test_matrix_files_with_a_bad_executor_or_slurm_table_are_one_line(raw, message):
    with pytest.raises(Exception) as raised:
        spec_mod.from_dict(raw, "m.toml")
    assert message in str(raised.value) and str(raised.value).startswith("m.toml: ")


def test_job_states_are_read_from_scontrols_own_line():
    line = (
        "JobId=17 JobName=mtb.m.cell UserId=root(0) GroupId=root(0) MCS_label=N/A "
        "Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=TIMEOUT "
        "Reason=TimeLimit Dependency=(null) Requeue=1 Restarts=2 BatchFlag=1 Reboot=0 "
        "ExitCode=0:15 RunTime=00:01:04 TimeLimit=00:01:00 WorkDir=/shared/out"
    )
    state = scheduler._parse(line)
    assert state == scheduler.JobState(
        "17", "TIMEOUT", "TimeLimit", "0:15", 2, "mtb.m.cell", "/shared/out"
    )
    assert state.terminal
    assert scheduler._parse("No jobs in the system") is None


def test_without_slurm_on_path_the_executor_stops_before_submitting(invoke, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    plan = tmp_path / "m.toml"
    plan.write_text('name = "m"\nexecutor = "slurm"\n[options]\nsteps = 2\n')
    result = invoke("matrix", "run", plan, "--output-dir", tmp_path / "out")
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: executor: slurm needs sbatch on PATH; it is not installed here"
    )
    assert not (tmp_path / "out" / "slurm").exists()


def test_slurm_script_refuses_flags_it_sets_itself(invoke):
    result = invoke("slurm", "script", "--", "--strategy", "ddp", "--nnodes", "3")
    assert result.exit_code == 2
    assert "--nnodes: set by mtb slurm script itself" in result.output
    bad = invoke("slurm", "script", "--time", "later", "--", "--strategy", "ddp")
    assert bad.exit_code == 2 and "--time: 'later' is not a Slurm time" in bad.output


def test_extra_sbatch_arguments_keep_their_spaces():
    chosen = settings.SlurmSettings(sbatch_args="--comment='a b' --exclusive", python="python3")
    asked = directives(script.render(job(settings=chosen)))
    assert "--comment='a b'" in asked and "--exclusive" in asked


def test_setup_runs_before_nounset_and_stops_the_job_when_it_fails(tmp_path):
    chosen = settings.SlurmSettings(setup="echo $UNSET_IN_SETUP; false", python="python3")
    text = script.render(job(settings=chosen, nodes=1))
    lines = text.splitlines()
    assert lines.index("echo $UNSET_IN_SETUP; false") < lines.index("set -uo pipefail")
    prelude = text[: text.index("set -uo pipefail")]
    ran = subprocess.run(["bash", "-c", prelude], capture_output=True, text=True, check=False)
    assert ran.returncode == 1 and "the setup lines failed" in ran.stderr


def test_a_failed_self_requeue_fails_the_job():
    assert 'scontrol requeue "$SLURM_JOB_ID" || exit $status' in script.render(
        job(checkpoints=True)
    )


def test_checkpointed_jobs_get_the_warning_inside_their_time_limit():
    plain, warned = settings.SlurmSettings(), settings.SlurmSettings(signal_s=300)
    assert plain.time_limit(600) == "12"  # 600 s + 120 s margin
    assert warned.time_limit(600, checkpoints=True) == "17"  # + the 300 s warning
    short = settings.SlurmSettings(time="1", signal_s=60)
    with pytest.raises(ConfigError, match="signal_s: 60 s is not below the time limit of 60 s"):
        short.check_warning(600)


@pytest.mark.parametrize(
    ("limit", "expected"),
    [("1", 60), ("1:30", 90), ("01:30:00", 5400), ("2-3", 183600), ("1-00:00:05", 86405)],
)
def test_slurm_times_in_seconds(limit, expected):
    assert settings.seconds(limit) == expected


def plans_of(raw: dict) -> list:
    from mtb.matrix.plan import Plan

    return [Plan(cell) for cell in expand(spec_mod.from_dict(raw, "m.toml"))]


def test_every_cells_resources_are_checked_before_any_job_is_submitted():
    from mtb.errors import UsageError
    from mtb.matrix import slurm_jobs

    raw = {"name": "m", "executor": "slurm", "axes": {"slurm_partiton": ["a", "b"]}}
    spec = spec_mod.from_dict(raw, "m.toml")
    with pytest.raises(UsageError, match=r"^cell slurm_partiton=a: slurm_partiton: unknown"):
        slurm_jobs.cell_settings(spec, plans_of(raw))
    shared = {"name": "m", "options": {"checkpoint_dir": "ck"}, "axes": {"seed": [1, 2]}}
    with pytest.raises(UsageError, match="checkpoint_dir: 'ck' is shared by 2 cells"):
        slurm_jobs.cell_settings(spec_mod.from_dict(shared, "m.toml"), plans_of(shared))


def test_an_ended_jobs_stand_in_never_replaces_the_result_it_left(tmp_path):
    from mtb.matrix import slurm_jobs

    spec = spec_mod.from_dict({"name": "m"}, "m.toml")
    (cell,) = expand(spec)
    left = tmp_path / "cells" / "cell.json"
    left.parent.mkdir()
    left.write_text('{"kind": "train", "status": "ok", "error": null}')
    ended = scheduler.JobState("7", "FAILED", "NonZeroExitCode", "1:0")
    assert slurm_jobs.collect(spec, cell, ended, tmp_path)["status"] == "ok"
    left.unlink()
    document = slurm_jobs.collect(spec, cell, ended, tmp_path)
    assert document["error"] == "slurm job 7 ended FAILED (NonZeroExitCode)"
    assert slurm_jobs.collect(spec, cell, ended, tmp_path) == document


def test_a_record_that_is_not_one_is_one_line(tmp_path):
    from mtb.errors import UsageError
    from mtb.matrix import slurm_jobs

    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "jobs.state").write_text("[]")
    with pytest.raises(UsageError, match="is not a record of Slurm jobs"):
        slurm_jobs.read_record(tmp_path)


def test_slurm_script_reads_flags_given_with_an_equals_sign(invoke):
    refused = invoke("slurm", "script", "--", "--strategy", "ddp", "--timeout=5")
    assert refused.exit_code == 2 and "--timeout: set by mtb slurm script" in refused.output
    checkpointed = invoke("slurm", "script", "--", "--checkpoint-dir=ck")
    assert "--save-on-signal" in checkpointed.output and "#SBATCH --requeue" in checkpointed.output


def test_a_second_submitter_of_one_matrix_is_refused(tmp_path):
    from mtb.matrix.slurm_session import _only_submitter

    with _only_submitter(tmp_path):
        held = subprocess.run(
            [
                sys.executable,
                "-c",
                "import pathlib, sys; from mtb.matrix.slurm_session import _only_submitter\n"
                f"with _only_submitter(pathlib.Path({str(tmp_path)!r})): pass",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert held.returncode == 1 and "another mtb matrix run is submitting" in held.stderr
    with _only_submitter(tmp_path):  # free again once the first is done
        pass


def test_show_and_dry_run_name_a_bad_cell_key_without_slurm(invoke, tmp_path):
    plan = tmp_path / "m.toml"
    plan.write_text('name = "m"\nexecutor = "slurm"\n[options]\nslurm_qos = "a b"\n')
    for command in (("matrix", "show", plan), ("matrix", "run", plan, "--dry-run")):
        result = invoke(*command)
        assert result.exit_code == 2
        assert result.output.strip() == "Error: cell cell: slurm_qos: 'a b' must be one word"
