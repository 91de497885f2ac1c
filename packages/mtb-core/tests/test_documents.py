"""The runtime services of mtb.api: one document frame, default paths, result writing."""

import json
import time
from pathlib import Path

import pytest

from mtb import api

FRAME = ["kind", "schema_version", "status", "error"]


@pytest.mark.timeout(60)
def test_result_document_spells_the_frame_once_and_in_order():
    doc = api.result_document(
        "comm", status="failed", error="boom", size=3, plugins=[], provenance={"p": 1}
    )
    assert list(doc) == [*FRAME, "size", "plugins", "provenance"]
    assert doc["schema_version"] == api.SCHEMA_VERSION
    assert (doc["status"], doc["error"], doc["provenance"]) == ("failed", "boom", {"p": 1})
    bare = api.result_document("matrix_cell")
    assert bare == {"kind": "matrix_cell", "schema_version": 1, "status": "ok", "error": None}


@pytest.mark.timeout(60)
def test_document_provenance_adds_times_and_extra_fields():
    plugins = [{"name": "x", "distribution": "d", "version": "1"}]
    block = api.document_provenance(plugins, started="2026-01-01T00:00:00+00:00", nodes=[1])
    assert block["start_utc"] == "2026-01-01T00:00:00+00:00"
    assert block["end_utc"] >= block["start_utc"] and block["nodes"] == [1]
    assert "git" in block and "evidence_problems" in block
    assert "end_utc" not in api.document_provenance([], finished=False)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_every_producer_uses_the_frame(invoke, tmp_path):
    """A train result and a failure document share the frame's keys and version."""
    from conftest import TINY

    out = tmp_path / "r.json"
    assert invoke("run", *TINY, "--output", str(out)).exit_code == 0
    doc = json.loads(out.read_text())
    assert list(doc)[:4] == FRAME and doc["schema_version"] == api.SCHEMA_VERSION


@pytest.mark.timeout(60)
def test_default_output_names_kind_time_and_label_and_skips_taken_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = Path(api.default_output("run", "single"))
    assert first.parent == Path("results") and first.name.startswith("run-")
    assert first.name.endswith("Z-single.json")
    first.parent.mkdir()
    first.write_text("{}")
    second = Path(api.default_output("run", "single"))
    assert second != first and not second.exists()
    assert Path(api.default_output("doctor")).name.startswith("doctor-")
    assert time.strftime("%Y") in api.default_output("comm")


@pytest.mark.timeout(60)
def test_write_result_renders_json_and_keeps_a_file_another_run_wrote(pm, tmp_path, capsys):
    target = tmp_path / "out" / "r.json"
    doc = api.result_document("doctor", checks=[])
    assert api.write_result(pm, doc, str(target)) == str(target)
    assert json.loads(target.read_text()) == doc
    kept = api.write_result(pm, {**doc, "status": "failed"}, str(target), overwrite=False)
    assert kept != str(target) and json.loads(target.read_text())["status"] == "ok"
    assert json.loads(Path(kept).read_text())["status"] == "failed"
    assert "written by another run meanwhile" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_failure_document_is_a_framed_train_result():
    from mtb.config import resolve

    config = resolve(flags={"strategy": "single", "preset": "tiny"})
    doc = api.failure_document("oom", "CUDA out of memory", config, [], {"end_utc": "t"})
    assert list(doc)[:4] == FRAME
    assert (doc["kind"], doc["status"], doc["error_class"]) == ("train", "oom", "cuda_oom")
    assert api.failure_status("RuntimeError: can't allocate memory") == "oom"


@pytest.mark.timeout(60)
def test_plugin_list_names_distribution_and_version(pm):
    listed = api.plugin_list(pm)
    assert {"name": "mtb.strategies.single", "distribution": "mtb-core"}.items() <= listed[
        0
    ].items()


@pytest.mark.timeout(60)
def test_the_builtin_profiler_meets_the_profiler_protocol(tmp_path):
    from mtb.profiling.torch_profiler import TorchProfiler

    assert isinstance(TorchProfiler(), api.Profiler)
    assert not isinstance(object(), api.Profiler)
