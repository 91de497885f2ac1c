"""Options declared by reporters, profilers and checkpoint backends, not only strategies."""

import pytest
from conftest import read_json

from mtb import hookimpl
from mtb.checkpoint.dcp_backend import DcpBackend
from mtb.cli import make_cli
from mtb.errors import PluginError
from mtb.options import Option
from mtb.reporting import Reporter
from mtb.strategies.single import SingleStrategy

RUN = ["run", "--strategy", "single", "--preset", "tiny", "--steps", "2", "--warmup-steps", "1"]


class TokensReporter(Reporter):
    name = "tps"
    suffix = ".txt"
    options = (Option("tps_digits", int, 1, "digits after the decimal point"),)

    def render(self, documents):
        tokens = documents[0]["summary"]["tokens_per_s"]["mean"]
        return f"{tokens:.{self.settings['tps_digits']}f}\n"


class TokensPlugin:
    @hookimpl
    def mtb_register_reporters(self, register):
        register(TokensReporter())


class TunedBackend(DcpBackend):
    name = "tuned-dcp"
    options = (Option("tuned_threads", int, 2, "writer threads"),)


class BackendPlugin:
    @hookimpl
    def mtb_register_checkpoint_backends(self, register):
        register(TunedBackend())


class ClashingStrategy(SingleStrategy):
    name = "clashing"
    options = (Option("tps_digits", int, 1, "same name, other meaning"),)


class ClashingPlugin:
    @hookimpl
    def mtb_register_strategies(self, register):
        register(ClashingStrategy())


def last_line(result) -> str:
    return result.output.strip().splitlines()[-1]


def test_a_reporter_option_is_set_by_flag_and_recorded(pm, invoke, tmp_path):
    pm.register(TokensPlugin(), name="tokens")
    out = tmp_path / "result.json"
    result = invoke(*RUN, "--output", out, "--report", "tps", "--tps-digits", "3")
    assert result.exit_code == 0, result.output
    assert len((tmp_path / "result.txt").read_text().strip().split(".")[1]) == 3
    assert read_json(out)["config"]["reporter_options"] == {"tps_digits": 3}


def test_a_reporter_option_is_set_by_toml_and_the_flag_wins(pm, invoke, tmp_path):
    pm.register(TokensPlugin(), name="tokens")
    run_file = tmp_path / "run.toml"
    run_file.write_text('reports = ["tps"]\n\n[reporter_options]\ntps_digits = 0\n')
    out = tmp_path / "result.json"
    assert invoke(*RUN, "--config", run_file, "--output", out).exit_code == 0
    assert "." not in (tmp_path / "result.txt").read_text()
    result = invoke(*RUN, "--config", run_file, "--print-config", "--tps-digits", "2")
    assert "[reporter_options]\ntps_digits = 2\n" in result.output


def test_a_bad_option_value_in_toml_is_one_line_before_the_run(pm, invoke, tmp_path):
    pm.register(TokensPlugin(), name="tokens")
    run_file = tmp_path / "run.toml"
    run_file.write_text('reports = ["tps"]\n\n[reporter_options]\ntps_digits = "many"\n')
    out = tmp_path / "result.json"
    result = invoke(*RUN, "--config", run_file, "--output", out)
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: reporter_options.tps_digits: expected an integer, got 'many'"
    )
    assert not out.exists()


def test_an_option_of_a_reporter_not_in_use_is_refused(pm, invoke, tmp_path):
    pm.register(TokensPlugin(), name="tokens")
    result = invoke(*RUN, "--output", tmp_path / "r.json", "--tps-digits", "2")
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: reporter_options.tps_digits: not an option of reporter 'json'; allowed: none"
    )


def test_help_lists_a_reporters_options_under_it(pm, invoke):
    pm.register(TokensPlugin(), name="tokens")
    text = invoke("run", "--help").output
    assert "Options of reporter tps:" in text
    assert text.index("--tps-digits") > text.index("Options of reporter tps:")


def test_a_checkpoint_backend_option_is_resolved_only_when_it_is_used(pm, invoke, tmp_path):
    pm.register(BackendPlugin(), name="backend")
    ckpt = ["--checkpoint-dir", tmp_path / "ck", "--checkpoint-backend", "tuned-dcp"]
    result = invoke(*RUN, *ckpt, "--print-config", "--tuned-threads", "4")
    assert result.exit_code == 0, result.output
    assert "[checkpoint_backend_options]\ntuned_threads = 4\n" in result.output
    result = invoke(*RUN, "--print-config", "--tuned-threads", "4")
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: checkpoint_backend_options.tuned_threads: not an option of any checkpoint "
        "backend in use (none); allowed: none"
    )


def test_an_option_name_two_kinds_declare_skips_the_second_plugin(pm, capsys):
    pm.register(ClashingPlugin(), name="clashing")
    pm.register(TokensPlugin(), name="tokens")
    cli = make_cli(pm)
    assert "tps" not in pm.registry("reporter").names()
    assert "clashing" in pm.registry("strategy").names()
    assert cli is not None
    assert capsys.readouterr().err == (
        "mtb: warning: plugin 'tokens' is skipped: option 'tps_digits' is declared by strategy "
        "'clashing' of 'clashing' (unpackaged) and by reporter 'tps' of 'tokens' (unpackaged); "
        "rename one\n"
    )


class StepsReporter(TokensReporter):
    name = "steps"
    options = (Option("steps", int, 1, "takes a core flag"),)


class StepsPlugin:
    @hookimpl
    def mtb_register_reporters(self, register):
        register(StepsReporter())


def test_an_option_named_like_a_core_flag_is_refused(pm):
    pm.register(StepsPlugin(), name="steps-plugin")
    with pytest.raises(PluginError) as caught:
        make_cli(pm)
    assert str(caught.value) == (
        "option 'steps' of reporter 'steps' of 'steps-plugin' (unpackaged) is named like "
        "mtb run's own --steps; rename it"
    )
