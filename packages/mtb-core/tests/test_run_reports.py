"""``mtb run --report FORMAT[:PATH]``: reports rendered after the JSON result is safe."""

import json
import subprocess
import sys

from conftest import read_json

from mtb import __version__, hookimpl
from mtb.reporting import Reporter, append_whole

RUN = ["run", "--strategy", "single", "--preset", "tiny", "--steps", "2", "--warmup-steps", "1"]


def jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def core(name: str) -> dict:
    plugin = "mtb.reporters.json_reporter"
    return {"name": name, "plugin": plugin, "distribution": "mtb-core", "version": __version__}


class Boom(Reporter):
    name = "boom"
    suffix = ".boom"

    def render(self, documents):
        raise ValueError("cannot render")


class RaisingReporter:
    @hookimpl
    def mtb_register_reporters(self, register):
        register(Boom())


def test_two_runs_append_to_one_json_lines_log(invoke, tmp_path):
    log = tmp_path / "runs.jsonl"
    for number in (1, 2):
        out = tmp_path / f"r{number}.json"
        result = invoke(*RUN, "--output", out, "--report", f"jsonl:{log}")
        assert result.exit_code == 0, result.output
        assert f"report written to {log}" in result.output
    documents = jsonl(log)
    assert documents == [read_json(tmp_path / "r1.json"), read_json(tmp_path / "r2.json")]
    assert documents[0]["components"]["reporters"] == [core("json"), core("jsonl")]


def test_the_default_report_path_is_the_output_with_the_reporters_suffix(invoke, tmp_path):
    run_file = tmp_path / "run.toml"
    run_file.write_text('reports = ["jsonl"]\n')
    out = tmp_path / "result.json"
    result = invoke(*RUN, "--config", run_file, "--output", out)
    assert result.exit_code == 0, result.output
    assert jsonl(tmp_path / "result.jsonl") == [read_json(out)]
    assert read_json(out)["config"]["reports"] == [f"jsonl:{tmp_path / 'result.jsonl'}"]


def test_a_reporter_that_raises_is_one_line_and_the_result_is_kept(pm, invoke, tmp_path):
    pm.register(RaisingReporter(), name="raising-reporter")
    out, log = tmp_path / "result.json", tmp_path / "log.jsonl"
    result = invoke(*RUN, "--output", out, "--report", "boom", "--report", f"jsonl:{log}")
    assert result.exit_code == 1
    failure = "reporter 'boom' of plugin raising-reporter failed: ValueError: cannot render"
    lines = result.output.strip().splitlines()
    assert f"mtb: {failure}" in lines
    assert lines[-1] == (
        f"Error: result written to {out} and kept; 1 plugin(s) failed, first: {failure}"
    )
    assert "Traceback" not in result.output
    assert read_json(out)["status"] == "ok"
    assert jsonl(log) == [read_json(out)]  # the next reporter still ran
    assert not (tmp_path / "result.boom").exists()


def test_a_failed_run_is_reported_too(invoke, tmp_path):
    out = tmp_path / "result.json"
    result = invoke(*RUN, "--inject-nan-at-step", "1", "--output", out, "--report", "jsonl")
    assert result.exit_code == 1
    [logged] = jsonl(tmp_path / "result.jsonl")
    assert logged == read_json(out) and logged["status"] == "failed"


def test_an_unknown_reporter_is_refused_before_the_run(invoke, tmp_path):
    out = tmp_path / "result.json"
    result = invoke(*RUN, "--output", out, "--report", "nope")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "Error: --report: unknown reporter 'nope'; installed: json, jsonl"
    )
    assert not out.exists()


def test_report_paths_are_checked_before_the_run(invoke, tmp_path):
    out = tmp_path / "result.json"
    (tmp_path / "file").write_text("")
    result = invoke(*RUN, "--output", out, "--report", f"jsonl:{tmp_path / 'file' / 'x.jsonl'}")
    assert result.exit_code == 2
    assert (
        result.output.strip()
        .splitlines()[-1]
        .startswith(f"Error: --report: {tmp_path / 'file' / 'x.jsonl'}: ")
    )
    assert not out.exists()
    result = invoke(*RUN, "--output", out, "--report", "json")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"Error: --report: {out}: is written by the result or another report; give another PATH"
    )
    assert not out.exists()


def test_an_existing_report_file_is_refused_unless_it_is_appended_or_overwritten(
    pm, invoke, tmp_path
):
    pm.register(RaisingReporter(), name="raising-reporter")
    (tmp_path / "result.boom").write_text("old")
    out = tmp_path / "result.json"
    result = invoke(*RUN, "--output", out, "--report", "boom")
    assert result.exit_code == 2
    assert "--report: " in result.output and "already exists; pass --overwrite" in result.output
    (tmp_path / "result.jsonl").write_text("")
    assert invoke(*RUN, "--output", out, "--report", "jsonl").exit_code == 0


def test_append_adds_a_missing_newline_first(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"a":1}')
    append_whole(log, '{"b":2}\n')
    assert log.read_text() == '{"a":1}\n{"b":2}\n'


APPEND_PAST_LIMIT = """
import resource, signal, sys
from mtb.reporting import append_whole
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
try:
    append_whole(sys.argv[1], "x" * 100000 + "\\n")
except OSError as error:
    print(error.errno)
"""


def test_an_append_cut_short_by_a_file_size_limit_leaves_the_log_whole(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"a":1}\n')
    done = subprocess.run(
        [sys.executable, "-B", "-c", APPEND_PAST_LIMIT, str(log), "4096"],  # -B: no .pyc cut short
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "27"  # EFBIG
    assert log.read_text() == '{"a":1}\n'


APPENDER = """
import sys
from mtb.reporting import append_whole
for i in range(200):
    append_whole(sys.argv[1], '{"writer":%s,"i":%d,"pad":"%s"}\\n' % (sys.argv[2], i, "p" * 3000))
"""


def test_concurrent_appenders_never_interleave(tmp_path):
    log = tmp_path / "log.jsonl"
    writers = [subprocess.Popen([sys.executable, "-c", APPENDER, str(log), str(n)]) for n in (1, 2)]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    lines = jsonl(log)
    assert len(lines) == 400
    for writer in (1, 2):
        assert [d["i"] for d in lines if d["writer"] == writer] == list(range(200))


def test_a_profiled_run_reports_too(invoke, tmp_path):
    out = tmp_path / "profile.json"
    window = ["--profile-warmup", "0", "--profile-active", "1", "--no-profile-baseline"]
    result = invoke(
        "profile", *RUN[1:], *window, "--output", out, "--report", f"jsonl:{tmp_path / 'p.jsonl'}"
    )
    assert result.exit_code == 0, result.output
    [logged] = jsonl(tmp_path / "p.jsonl")
    assert logged == read_json(out) and logged["kind"] == "profile"
    assert [r["name"] for r in logged["components"]["reporters"]] == ["json", "jsonl"]


def test_a_reporter_missing_where_rank_0_renders_is_one_line(pm, tmp_path, capsys):
    from mtb import config as config_mod
    from mtb.run_reports import render

    config = config_mod.resolve(flags={"preset": "tiny", "reports": [f"gone:{tmp_path / 'x'}"]})
    assert render(pm, {"kind": "train"}, config) == [
        "reporter 'gone' failed: unknown reporter 'gone'; installed: json, jsonl"
    ]
