"""The Slurm batch script and settings, without a cluster: what each job asks Slurm for.

The scripts run for real on a two-node Slurm cluster in tests/test_slurm.py.
"""

import shlex
import subprocess

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
